-- The unprivileged user each tenant's code runs as under the local driver's
-- sandbox: a slot per namespace, given once and never reused, so every
-- worker on every machine runs a namespace's functions, jobs and builds as
-- the same uid (the configured first uid plus the slot) and no two
-- namespaces share one. Not a read model: nothing in the log says it, and a
-- lost table only gives namespaces new uids.
create table sandbox_uids (
    namespace  text primary key,
    slot       integer not null unique check (slot >= 0),
    given_at   timestamptz not null default now()
);
