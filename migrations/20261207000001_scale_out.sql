-- Scaling out. The functions read model keeps each function's scaling
-- settings as its spec has them (`min_instances`, `max_instances`,
-- `concurrency`, each left out when the spec leaves it out), how many
-- instances should serve as the log says (`Function::instances`), and
-- each instance's endpoint when the proxy sends calls to the instances
-- itself (the last `FunctionDeployed`'s `instances`).
alter table functions add column scaling jsonb not null default '{}';
alter table functions add column instances int not null default 0;
alter table functions add column instance_endpoints jsonb not null default '[]';
-- Rows written before instances were counted: one serves where an
-- endpoint does.
update functions set instances = 1
 where endpoint is not null and not idle and phase <> 'Deleted';

-- The calls in flight each API process measured of each function, on
-- average over its last report (every few hundred milliseconds while it
-- has calls, and once more at zero after them). The autoscaler sums the
-- fresh reports of every process; a process that is gone stops
-- reporting, and its report goes stale. Not a read model: the log says
-- nothing of calls, only of the decisions taken on them.
create table function_load (
    namespace   text not null,
    name        text not null,
    replica     text not null,
    in_flight   double precision not null,
    reported_at timestamptz not null,
    primary key (namespace, name, replica)
);
