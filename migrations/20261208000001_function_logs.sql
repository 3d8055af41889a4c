-- What functions print: every line an instance, a job or a cron run
-- wrote to stdout or stderr, with the call that printed it when there was
-- one (store/src/function_logs.rs). Not a read model and not the log:
-- output, kept for a retention and then dropped a day at a time.
--
-- Partitioned by the day a line was read (UTC); the workers create each
-- day's partition ahead of it and drop the ones past every namespace's
-- retention. Lines that find no day's partition (a clock far off) land in
-- the default one, which retention empties like the others.
--
-- `id` orders lines as they committed: every writer takes the advisory
-- lock `function_logs` before it draws its ids and holds it to its
-- commit, so a reader that sees a line sees every line with a smaller id.
-- A tail resumes after the last id it sent, and misses and repeats none.
create sequence function_logs_id;

create table function_logs (
    id          bigint not null,
    at          timestamptz not null,
    namespace   text not null,
    function    text not null,
    version     int,
    -- Which process printed it: a local instance's port, a pod's name, a
    -- job run's stream.
    instance    text not null,
    -- The invocation record of the call it was printed for, when the
    -- runtime wrapper marked it (or a job or cron run's record).
    invocation  uuid,
    -- 1: stdout, 2: stderr.
    stream      smallint not null,
    line        text not null,
    -- The line was longer than sless keeps, and was cut.
    truncated   boolean not null default false
) partition by range (at);

create index function_logs_by_function on function_logs (namespace, function, id);
create index function_logs_by_invocation on function_logs (invocation, id)
    where invocation is not null;

create table function_logs_default partition of function_logs default;

-- Lines a function printed that were not kept: past its budget, or while
-- the writer could not keep up. Counted per function, never per line.
create table function_log_drops (
    namespace   text not null,
    function    text not null,
    dropped     bigint not null default 0,
    updated_at  timestamptz not null default now(),
    primary key (namespace, function)
);
