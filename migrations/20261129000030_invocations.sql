-- Invocation records: one row per call through the invoke proxy
-- (`/fn/{ns}/{name}[/...]`) to a function that exists. Written by the API
-- in batches off the request path, read a page at a time newest first, and
-- kept bounded by the writer: rows older than the retention age go, and so
-- do a function's rows beyond its newest N.
--
-- Not an event: a record says what a call did, not what the system decided,
-- and nothing is rebuilt from it. Rows are deleted by retention.
create table invocations (
    -- A UUIDv7 of `started_at`: ordering by id is ordering by start time to
    -- the millisecond, so deleting by age walks the primary key and needs
    -- no index of its own.
    id          uuid primary key,
    namespace   text not null,
    function    text not null,
    -- The deployed version that answered; null when none did (nothing
    -- deployed yet).
    version     integer,
    started_at  timestamptz not null,
    -- From the request's arrival to the last byte of the answer handed to
    -- the client's connection (or the answer abandoned).
    duration_us bigint not null,
    status      smallint not null,
    -- Body bytes, counted as they streamed through.
    bytes_in    bigint not null,
    bytes_out   bigint not null,
    -- The first call this API process sent to a freshly started endpoint.
    cold        boolean not null,
    error       text,
    request_id  text not null
);

-- One function's records newest first (scanned backwards), its cursor
-- pages, and the per-function cap: all index range scans.
create index invocations_by_function on invocations (namespace, function, started_at, id);
