-- The functions and triggers each namespace has, kept beside the log.
--
-- A quota check counts them under the namespace's lock (store/src/usage.rs),
-- so every create in a namespace pays for the count in turn. Counted from
-- the log, that cost grew with the namespace and filling one namespace was
-- quadratic. Here the count is one row, moved by a trigger on `events` in
-- the transaction that appends the event, so it is exactly the log's
-- (created less deleted) at every commit: events are never updated or
-- deleted. One row per namespace, so a transaction that appends both
-- kinds (a function and its triggers deleted) takes one row lock, not two
-- in an order another transaction could reverse.
create table namespace_counts (
    namespace text primary key,
    functions bigint not null default 0,
    triggers  bigint not null default 0
);

insert into namespace_counts (namespace, functions, triggers)
select namespace,
       count(*) filter (where type = 'FunctionCreated') - count(*) filter (where type = 'FunctionDeleted'),
       count(*) filter (where type = 'TriggerCreated') - count(*) filter (where type = 'TriggerDeleted')
from events
where type in ('FunctionCreated', 'FunctionDeleted', 'TriggerCreated', 'TriggerDeleted')
group by namespace;

create function count_in_namespace() returns trigger
language plpgsql as $$
begin
    insert into namespace_counts as c (namespace, functions, triggers)
    values (new.namespace,
            case new.type when 'FunctionCreated' then 1 when 'FunctionDeleted' then -1 else 0 end,
            case new.type when 'TriggerCreated' then 1 when 'TriggerDeleted' then -1 else 0 end)
    on conflict (namespace) do update
        set functions = c.functions + excluded.functions,
            triggers = c.triggers + excluded.triggers;
    return null;
end;
$$;

-- Only the four types fire it: every other append pays for the WHEN alone.
create trigger events_counted_in_namespace after insert on events
    for each row
    when (new.type in ('FunctionCreated', 'FunctionDeleted', 'TriggerCreated', 'TriggerDeleted'))
    execute function count_in_namespace();
