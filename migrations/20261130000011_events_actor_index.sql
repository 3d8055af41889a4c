-- no-transaction
-- The audit log's "what did this user (or this part of sless) do in a
-- namespace, newest first" (store/src/audit.rs, `?actor=`). The actor lives
-- in `metadata->>'actor'`; without this index the query walks the
-- namespace's events newest first and filters on it, which for a rare actor
-- in a namespace of 250,000 events took 160 ms (api/tests/api/events_plan.rs);
-- with it, about a millisecond. The expression must be spelled as the query
-- spells it for the planner to match it.
--
-- Built concurrently, as `..._events_audit_index.sql` (see there).
create index concurrently if not exists events_namespace_actor_position
    on events (namespace, (metadata ->> 'actor'), position);
