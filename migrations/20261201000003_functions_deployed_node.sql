-- The worker a function's process runs on, under the local driver (the
-- `node` of its last `FunctionDeployed`); null on a cluster, or when
-- nothing runs. Workers look here for functions whose worker is gone.
alter table functions add column deployed_node text;

-- The workers alive: each one's heartbeat, every third of its lease. A
-- function placed on a worker whose heartbeat is older than a lease (or
-- that left) is placed again by another. Not a read model: the log says
-- nothing of it.
create table workers (
    id       text primary key,
    seen_at  timestamptz not null default now()
);
