-- A command in one statement (store/src/command.rs).
--
-- A command used to be BEGIN, append, enqueue, idempotency key, COMMIT: five
-- round trips, each a context switch on both sides. `run_command` does the
-- three writes in one call, which a caller runs in autocommit (a command that
-- has more to do, a quota or blobs to check, calls it inside its own
-- transaction). In order:
-- 1. `append_events` (the stream lock first, then the version check, then
--    the insert), unchanged but for `expected`: NULL appends at the stream's
--    current version, for writes that do not depend on the stream's state
--    (they cannot conflict; the lock orders them); and one event is written
--    by a plain INSERT, not through unnest;
-- 2. when the append wrote events, `enqueue_work` for the work they call for
--    (the same upsert `queue::enqueue` runs: one pending item per key). With
--    no `work_channel` it does not NOTIFY: a NOTIFY makes its transaction
--    hold a cluster-wide lock until its commit is flushed, so commands that
--    NOTIFY commit one at a time. The API wakes the workers after the commit
--    instead, one NOTIFY for as many commands as committed meanwhile
--    (store/src/queue.rs `Ringer`);
-- 3. when the append succeeded, the answer under its idempotency key. A key
--    already taken by a concurrent request raises SLKEY, which rolls back
--    the whole statement: the caller answers with the stored answer. An
--    answer that names its append's position at its top level
--    (`idem_position`) gets the position the append wrote.
-- A version conflict writes nothing and returns `actual` as before.

create or replace function append_events(
    stream_name text,
    lock_key bigint,
    expected bigint,
    types text[],
    namespaces text[],
    datas jsonb[],
    metadatas jsonb[],
    out first_write boolean,
    out actual bigint,
    out last_position bigint
)
language plpgsql as $$
declare
    base bigint;
begin
    first_write := pg_current_xact_id_if_assigned() is null;
    if not first_write then
        return;
    end if;
    if expected is not null then
        select coalesce(max(e.version), 0) into actual from events e where e.stream = stream_name;
        if actual > expected then
            return;
        end if;
    end if;
    begin
        perform pg_advisory_xact_lock(lock_key);
        select coalesce(max(e.version), 0) into actual from events e where e.stream = stream_name;
        if actual <> coalesce(expected, actual) or coalesce(cardinality(types), 0) = 0 then
            raise exception using errcode = 'SL409';
        end if;
    exception when sqlstate 'SL409' then
        -- `actual` keeps what the block read: the version the caller is told.
        return;
    end;
    base := actual;
    if cardinality(types) = 1 then
        -- Most appends are one event: a plain INSERT costs less than unnest.
        insert into events (stream, version, type, namespace, data, metadata)
        values (stream_name, base + 1, types[1], namespaces[1], datas[1], metadatas[1])
        returning events.position into last_position;
    else
        with written as (
            insert into events (stream, version, type, namespace, data, metadata)
            select stream_name, base + x.ord, x.t, x.ns, x.d, x.m
            from unnest(types, namespaces, datas, metadatas) with ordinality as x(t, ns, d, m, ord)
            order by x.ord
            returning events.position
        )
        select max(w.position) into last_position from written w;
    end if;
    actual := base + cardinality(types);
    if not pg_try_advisory_xact_lock_shared(1936483699, 1) then
        perform pg_notify('sless_events', '');
    end if;
end;
$$;

-- One pending item per key: enqueueing again refreshes it (its payload, with
-- the superseded item's trace causes kept as links within `links_path`, its
-- attempts and when it is due). NOTIFYs `channel` at commit, unless it is
-- NULL: the caller then wakes the workers itself once it has committed.
create function enqueue_work(
    work_kind text,
    work_key text,
    work_payload jsonb,
    channel text,
    links_path jsonpath
) returns void
language plpgsql as $$
begin
    insert into work_items (kind, key, payload) values (work_kind, work_key, work_payload)
    on conflict (key) where state = 'pending'
    do update set kind = excluded.kind,
                  payload = case
                      when work_items.payload ?| array['traceparent', 'links'] then
                          excluded.payload || jsonb_build_object('links', jsonb_path_query_array(
                              coalesce(excluded.payload -> 'links', '[]')
                              || coalesce(work_items.payload -> 'links', '[]')
                              || case when work_items.payload ? 'traceparent'
                                     then jsonb_build_array(work_items.payload -> 'traceparent')
                                     else '[]' end,
                              links_path))
                      else excluded.payload
                  end,
                  attempts = 0, run_at = now(), last_error = null;
    if channel is not null then
        perform pg_notify(channel, '');
    end if;
end;
$$;

create function run_command(
    stream_name text,
    lock_key bigint,
    expected bigint,
    types text[],
    namespaces text[],
    datas jsonb[],
    metadatas jsonb[],
    work_kind text,
    work_key text,
    work_payload jsonb,
    work_channel text,
    work_links jsonpath,
    idem_actor text,
    idem_key text,
    idem_hash text,
    idem_status smallint,
    idem_response jsonb,
    idem_headers jsonb,
    idem_position boolean,
    out first_write boolean,
    out actual bigint,
    out last_position bigint
)
language plpgsql as $$
begin
    select a.first_write, a.actual, a.last_position into first_write, actual, last_position
    from append_events(stream_name, lock_key, expected, types, namespaces, datas, metadatas) a;
    if last_position is null then
        -- Refused, or nothing to append: an empty command at its expected
        -- version still keeps its answer.
        if not first_write or coalesce(cardinality(types), 0) > 0
           or actual <> coalesce(expected, actual) then
            return;
        end if;
    elsif work_kind is not null then
        perform enqueue_work(work_kind, work_key, work_payload, work_channel, work_links);
    end if;
    if idem_key is not null then
        insert into idempotency_keys (actor, key, request_hash, status, response, headers)
        values (idem_actor, idem_key, idem_hash, idem_status,
                case when idem_position
                     then jsonb_set(idem_response, '{position}', to_jsonb(coalesce(last_position, 0)))
                     else idem_response end,
                idem_headers)
        on conflict (actor, key) do nothing;
        if not found then
            raise exception 'the idempotency key % is taken', idem_key using errcode = 'SLKEY';
        end if;
    end if;
end;
$$;
