-- What a call through /fn asked for: its method and its path below the
-- function (without the query, which may hold secrets). Null for job and
-- cron runs, and for calls recorded before.
alter table invocations add column method text;
alter table invocations add column path text;
