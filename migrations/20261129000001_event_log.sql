-- The event log: append-only, one row per event.
--
-- `xid` is the writing transaction's id (xid8, as bigint). Readers take only
-- events whose transaction is older than every transaction still running
-- (pg_snapshot_xmin) and order by (xid, position), so an event whose
-- transaction commits late is never skipped. See store/src/eventlog.rs.
create table events (
    position    bigint generated always as identity primary key,
    xid         bigint not null default (pg_current_xact_id()::text::bigint),
    stream      text not null,
    version     integer not null check (version >= 1),
    type        text not null,
    namespace   text not null,
    data        jsonb not null,
    metadata    jsonb not null default '{}'::jsonb,
    recorded_at timestamptz not null default now(),
    unique (stream, version)
);

create index events_xid_position on events (xid, position);
create index events_namespace_position on events (namespace, position);

-- Append-only, enforced by the database: no UPDATE, DELETE or TRUNCATE.
create function events_are_append_only() returns trigger
language plpgsql as $$
begin
    raise exception 'the event log is append-only: % on events is not allowed', tg_op
        using errcode = 'insufficient_privilege';
end;
$$;

create trigger events_no_update_or_delete
    before update or delete on events
    for each row execute function events_are_append_only();

create trigger events_no_truncate
    before truncate on events
    for each statement execute function events_are_append_only();

-- Idempotency keys: the first answer to a request, kept so a retry gets it
-- again and appends nothing. Written in the same transaction as the events.
create table idempotency_keys (
    actor        text not null,
    key          text not null,
    request_hash text not null,
    status       smallint not null,
    response     jsonb not null,
    created_at   timestamptz not null default now(),
    primary key (actor, key)
);

-- Where each projector has read up to, as the (xid, position) pair it last applied.
create table projector_checkpoints (
    name       text primary key,
    xid        bigint not null default 0,
    position   bigint not null default 0,
    updated_at timestamptz not null default now()
);
