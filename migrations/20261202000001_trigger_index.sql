-- The per-function trigger index (store/src/trigger_index.rs): which
-- triggers each function has, as the log has them now. The reconciler
-- decides from it whether a function is served and which cron triggers a
-- driver runs; before, it read and folded every trigger event of the
-- namespace, which grows with the namespace.
--
-- Not a read model: the projector does not write it and a replay does not
-- rebuild it. An AFTER INSERT trigger on `events` keeps it in the append's
-- own transaction, so it is exact at once (the read model `triggers` lags)
-- and an append that rolls back leaves nothing in it. The stream lock of
-- `append_events` orders a stream's appends, and events are never updated
-- or deleted, so a row follows its stream's events in version order.

-- One row per trigger that exists: the state after its stream's events,
-- as `Trigger::evolve` folds them. `spec` is the last `TriggerCreated`'s
-- spec (the JSON of `TriggerSpec`), its `enabled` set by the toggles
-- since; the other columns are read out of it, so they cannot disagree
-- with it. A trigger whose last lifecycle event is `TriggerDeleted` has no
-- row.
create table trigger_index (
    -- `trigger/{ns}/{name}`: every trigger event names its stream, only
    -- `TriggerCreated` names the trigger.
    stream    text primary key,
    namespace text not null,
    spec      jsonb not null,
    name      text generated always as (spec->>'name') stored,
    function  text generated always as (spec->>'function') stored,
    -- `http` or `cron`.
    kind      text generated always as (spec->>'type') stored,
    enabled   boolean generated always as ((spec->>'enabled')::boolean) stored
);
-- A function's triggers (what the reconciler asks).
create index trigger_index_function on trigger_index (namespace, function);

-- One trigger event applied to the index: what the trigger below does for
-- each new event, and the backfill for each old one.
create function trigger_index_apply(
    event_stream text,
    event_namespace text,
    event_type text,
    event_data jsonb
) returns void
language plpgsql as $$
begin
    case event_type
    when 'TriggerCreated' then
        -- Created, or created again after a delete: the spec replaces the row.
        insert into trigger_index (stream, namespace, spec)
        values (event_stream, event_namespace, event_data->'spec')
        on conflict (stream) do update
            set namespace = excluded.namespace, spec = excluded.spec;
    when 'TriggerToggled' then
        update trigger_index
        set spec = jsonb_set(spec, '{enabled}', event_data->'enabled')
        where stream = event_stream;
    when 'TriggerDeleted' then
        delete from trigger_index where stream = event_stream;
    else
        null;
    end case;
end;
$$;

create function trigger_index_follow() returns trigger
language plpgsql as $$
begin
    perform trigger_index_apply(new.stream, new.namespace, new.type, new.data);
    return null;
end;
$$;

-- Only trigger events fire it: the WHEN clause is checked on the inserted
-- row without calling a function, so other appends pay nothing for it.
-- Rows of one insert fire in the order they were inserted, which
-- `append_events` makes version order.
create trigger events_keep_trigger_index
    after insert on events
    for each row
    when (new.type in ('TriggerCreated', 'TriggerToggled', 'TriggerDeleted'))
    execute function trigger_index_follow();

-- The backfill: the triggers of the events already in the log, folded
-- stream by stream in version order. Creating the trigger above locked
-- `events` against inserts (SHARE ROW EXCLUSIVE, held until this
-- migration commits), after every append in flight had ended, so this
-- reads every event appended before the trigger existed, and every later
-- one goes through the trigger. It reads the log's trigger events once.
do $$
declare
    e record;
begin
    for e in
        select stream, namespace, type, data
        from events
        where type in ('TriggerCreated', 'TriggerToggled', 'TriggerDeleted')
        order by stream, version
    loop
        perform trigger_index_apply(e.stream, e.namespace, e.type, e.data);
    end loop;
end;
$$;
