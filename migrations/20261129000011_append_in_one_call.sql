-- Appending in one round trip (store/src/eventlog.rs `append`).
--
-- `append_events` does, in this order:
-- 1. take the stream's advisory lock (transaction-scoped);
-- 2. refuse (first_write = false, nothing written) if the transaction already
--    has an xid: the lock would then no longer order this append's xid after
--    the previous append's commit;
-- 3. compare the stream's version with `expected`: on a mismatch, return the
--    actual version and write nothing;
-- 4. insert the events, numbered expected + 1, expected + 2, ...;
-- 5. ring the projector's doorbell (below).
-- Statement-level functions run their statements in order, so the lock still
-- comes before anything that assigns an xid. Without a mismatch, `actual` is
-- the stream's version after the append and `last_position` the position of
-- its last event.
--
-- The doorbell. A NOTIFY makes its transaction take a cluster-wide lock at
-- commit and hold it until the commit is flushed, so notifying commits never
-- share a WAL flush: a NOTIFY from every append halves append throughput at
-- eight clients. So an append notifies only when a projector is asleep. A
-- projector with nothing left to apply takes advisory lock (1936483699, 1)
-- exclusively on its listening session before it sleeps (projector/src/lib.rs);
-- an append that cannot take that lock shared knows a projector sleeps and
-- NOTIFYs `sless_events`. An append that did take it keeps it until its
-- transaction ends, so a projector gets the lock only after every append that
-- did not notify has committed or rolled back, and it looks for events once
-- more after taking it: no committed event waits for the polling fallback.
create function append_events(
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
begin
    perform pg_advisory_xact_lock(lock_key);
    first_write := pg_current_xact_id_if_assigned() is null;
    if not first_write then
        return;
    end if;
    select coalesce(max(e.version), 0) into actual from events e where e.stream = stream_name;
    if actual <> expected or coalesce(cardinality(types), 0) = 0 then
        return;
    end if;
    with written as (
        insert into events (stream, version, type, namespace, data, metadata)
        select stream_name, expected + x.ord, x.t, x.ns, x.d, x.m
        from unnest(types, namespaces, datas, metadatas) with ordinality as x(t, ns, d, m, ord)
        order by x.ord
        returning events.position
    )
    select max(w.position) into last_position from written w;
    actual := expected + cardinality(types);
    if not pg_try_advisory_xact_lock_shared(1936483699, 1) then
        perform pg_notify('sless_events', '');
    end if;
end;
$$;
