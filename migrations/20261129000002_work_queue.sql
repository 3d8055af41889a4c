-- The work queue. A row is one item of work: "look at function X".
--
-- Per-key serialization is held by the database, not by a check-then-act:
--   * at most one pending item per key (enqueue is ON CONFLICT DO UPDATE);
--   * at most one running item per key.
-- A running item has a lease (lease_until) and an attempt number that fences
-- a worker whose lease expired: its heartbeat and completion name the attempt
-- and change nothing once another worker has taken the item.
create table work_items (
    id           bigint generated always as identity primary key,
    kind         text not null,
    key          text not null,
    payload      jsonb not null default '{}'::jsonb,
    state        text not null default 'pending' check (state in ('pending', 'running')),
    run_at       timestamptz not null default now(),
    attempts     integer not null default 0,
    max_attempts integer not null default 8,
    lease_owner  text,
    lease_until  timestamptz,
    last_error   text,
    created_at   timestamptz not null default now()
);

create unique index work_items_one_pending_per_key on work_items (key) where state = 'pending';
create unique index work_items_one_running_per_key on work_items (key) where state = 'running';
create index work_items_due on work_items (run_at, id) where state = 'pending';
create index work_items_leases on work_items (lease_until) where state = 'running';

-- Items that ran out of attempts, kept for operators; their error also
-- reaches the function's status as a ReconcileAbandoned event.
create table work_dead (
    id         bigint primary key,
    kind       text not null,
    key        text not null,
    payload    jsonb not null,
    attempts   integer not null,
    last_error text,
    created_at timestamptz not null,
    died_at    timestamptz not null default now()
);
