-- Triggers and jobs: their read models (written by the projector only,
-- rebuilt by a replay like every read model), and the origin of an
-- invocation record.

-- One row per trigger that exists; a deleted trigger's row is removed.
create table triggers (
    namespace      text not null,
    name           text not null,
    function       text not null,
    -- `http` or `cron`.
    kind           text not null,
    -- A cron trigger's five-field schedule and IANA time zone.
    schedule       text,
    timezone       text,
    enabled        boolean not null,
    -- When it was created or last enabled, while it is enabled: a cron
    -- trigger never runs a tick from before it (no catch-up of ticks it
    -- was not there for).
    active_since   timestamptz,
    stream_version integer not null,
    created_at     timestamptz not null,
    updated_at     timestamptz not null,
    primary key (namespace, name)
);
-- Which triggers a function has (the invoke proxy asks on every lookup).
create index triggers_function on triggers (namespace, function);
-- What the scheduler walks: the enabled cron triggers.
create index triggers_cron on triggers (namespace, name) where kind = 'cron' and enabled;

-- One row per job that exists, and per cron trigger run; a deleted job's
-- row is removed. Keyed by stream: `job/{ns}/{name}` or
-- `cron/{ns}/{trigger}/{unix seconds}`.
create table jobs (
    stream           text primary key,
    namespace        text not null,
    -- The job's name; for a cron run `{trigger}-{unix seconds}`.
    name             text not null,
    function         text not null,
    version          integer not null,
    input            jsonb not null,
    timeout_sec      integer not null,
    -- `api` (a user asked) or `cron`.
    origin           text not null,
    trigger          text,
    scheduled_at     timestamptz,
    missed           integer,
    -- Pending, Running, Succeeded, Failed, Skipped.
    status           text not null,
    exit_code        integer,
    error            text,
    timed_out        boolean not null default false,
    stdout           text,
    stdout_bytes     bigint,
    stdout_truncated boolean not null default false,
    stderr           text,
    stderr_bytes     bigint,
    stderr_truncated boolean not null default false,
    duration_ms      bigint,
    requested_at     timestamptz not null,
    started_at       timestamptz,
    finished_at      timestamptz,
    stream_version   integer not null
);
-- A user's job by name (cron runs share the table, under other names).
create unique index jobs_by_name on jobs (namespace, name) where origin = 'api';
-- A cron trigger's runs, newest first (the scheduler asks for the last).
create index jobs_cron_runs on jobs (namespace, trigger, scheduled_at desc) where origin = 'cron';

-- Where a call came from: `http` (the invoke proxy), `job` or `cron` (a
-- run recorded by the worker that ran it), and which run.
alter table invocations
    add column origin text not null default 'http',
    add column run text;
