-- no-transaction
-- The audit log's "events of one type in a namespace, newest first"
-- (store/src/audit.rs, GET /v1/namespaces/{ns}/events?type=...): without
-- it, the query walks (namespace, position) and filters on type, reading
-- every event of the namespace newer than the last match; a rare type in a
-- large namespace reads them all. With it, the query reads only the page.
--
-- Built concurrently, so appends go on while it is built (a plain CREATE
-- INDEX would hold them for the whole build). That cannot run inside a
-- transaction, hence the first line, and one statement per file. If the
-- build fails it leaves an invalid index behind: drop it
-- (`drop index concurrently events_namespace_type_position`) and migrate
-- again.
create index concurrently if not exists events_namespace_type_position
    on events (namespace, type, position);
