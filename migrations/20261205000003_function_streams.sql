-- Every function stream the log has, one row each, kept beside the log.
--
-- At every start sless enqueues a reconcile of every function the log knows
-- (store/src/queue.rs `enqueue_reconcile_all`), the deleted ones included.
-- Read from the log, that was a `distinct` over every event of every
-- function: a cost that grew with the history, not with the functions
-- (425 ms at 910,000 events of 100,000 functions). A stream's first event
-- (version 1) registers it here, in the transaction that appends it;
-- events are never updated or deleted, so this is exactly the set of
-- function streams in the log at every commit.
create table function_streams (
    stream text primary key
);

insert into function_streams
select stream from events where stream like 'function/%' and version = 1
on conflict do nothing;

create function register_function_stream() returns trigger
language plpgsql as $$
begin
    insert into function_streams (stream) values (new.stream) on conflict do nothing;
    return null;
end;
$$;

-- Only a function stream's first event fires it.
create trigger events_function_streams after insert on events
    for each row
    when (new.version = 1 and new.stream like 'function/%')
    execute function register_function_stream();
