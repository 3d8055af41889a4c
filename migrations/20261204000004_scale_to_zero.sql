-- Scaling to zero. The functions read model keeps each function's idle
-- window (null: the platform's default) and whether it is scaled to zero
-- (`FunctionScaledToZero` until `FunctionScaledUp`).
alter table functions add column scale_to_zero_after_sec int;
alter table functions add column idle boolean not null default false;

-- When a call last reached each function through the invoke proxy: every
-- API process writes it when a call starts (at most once a second per
-- function), so the workers' idle sweep, which compares it with the
-- database's clock, sees the calls of every replica. Not a read model:
-- the log says nothing of calls.
create table function_activity (
    namespace    text not null,
    name         text not null,
    last_call_at timestamptz not null,
    primary key (namespace, name)
);
