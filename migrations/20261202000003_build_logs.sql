-- Build logs (store/src/build_logs.rs). One row per version whose build has
-- started: its latest attempt and how that attempt ended. While a build
-- runs, the worker appends what it prints to build_log_chunks (the lines
-- of the last ~50 ms, one chunk each) and NOTIFYs `sless_build_log` with
-- `{ns}/{name}/{version}`, so an API process that follows the log wakes at
-- once. When the build ends, the whole log is put in S3
-- (`blobs/build-logs/{ns}/{name}/v{version}.log`), then the row records the
-- end and the attempt's chunks are deleted: chunks exist only while a
-- build runs. A new attempt of a version (a retry, a rebuild on another
-- worker) takes the row over and deletes the chunks of the one before.
-- A row goes with its version: the reconciler deletes a pruned version's
-- object and row. Not a read model: workers write it, the API reads it,
-- and a replay leaves it alone.
create table build_logs (
    namespace  text not null,
    name       text not null,
    version    integer not null,
    attempt    uuid not null,
    started_at timestamptz not null default now(),
    -- The attempt's worker was last heard of (a chunk or a heartbeat).
    touched_at timestamptz not null default now(),
    ended_at   timestamptz,
    outcome    text check (outcome in ('succeeded', 'failed')),
    error      text,
    -- Some attempt's whole log is in S3 under the version's key.
    stored     boolean not null default false,
    primary key (namespace, name, version)
);

create unique index build_logs_attempt on build_logs (attempt);
-- The sweep of attempts whose worker went silent.
create index build_logs_running on build_logs (touched_at) where ended_at is null;

create table build_log_chunks (
    attempt uuid not null,
    seq     integer not null,
    text    text not null,
    primary key (attempt, seq)
);
