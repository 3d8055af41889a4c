-- A losing append on a hot stream no longer holds up the appends behind it.
--
-- Before, on a hot stream every client that lost the race still queued for
-- the stream's advisory lock, and once it had the lock and found its
-- conflict it kept the lock until its client rolled back (a round trip
-- later): the next client waited for that, and 16 clients on one stream
-- appended about 100 events/s. Now:
-- 1. an append whose expected version is already behind the stream's
--    committed version is refused before it waits for the lock (versions only
--    grow, so it is a conflict whatever happens next). This look is a plain
--    read: no xid is assigned, so the lock still comes before anything that
--    assigns one;
-- 2. the lock is taken inside a block with an exception handler (a
--    subtransaction): an append that finds a conflict under the lock leaves
--    the block by an exception, which rolls the subtransaction back and
--    releases the lock at once. An append that goes on leaves the block
--    normally, and the lock passes to the transaction until it ends, as before.
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
begin
    first_write := pg_current_xact_id_if_assigned() is null;
    if not first_write then
        return;
    end if;
    select coalesce(max(e.version), 0) into actual from events e where e.stream = stream_name;
    if actual > expected then
        return;
    end if;
    begin
        perform pg_advisory_xact_lock(lock_key);
        select coalesce(max(e.version), 0) into actual from events e where e.stream = stream_name;
        if actual <> expected or coalesce(cardinality(types), 0) = 0 then
            raise exception using errcode = 'SL409';
        end if;
    exception when sqlstate 'SL409' then
        -- `actual` keeps what the block read: the version the caller is told.
        return;
    end;
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
