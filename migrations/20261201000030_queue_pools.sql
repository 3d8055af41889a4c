-- A worker claims jobs (RunJob) and the rest of its work for two separate
-- pools of handler slots, each claim asking only for its own kinds
-- (store/src/queue.rs `claim_kinds`). One index of due items per pool keeps
-- both claims an index scan in run_at order whatever the other pool has
-- waiting: a backlog of jobs is never scanned past by a claim of
-- reconciles, nor a burst of reconciles by a claim of jobs. A claim of
-- every kind (a worker driven step by step) reads the table itself.
create index work_items_due_jobs on work_items (run_at, id)
    where state = 'pending' and kind = 'RunJob';
create index work_items_due_other on work_items (run_at, id)
    where state = 'pending' and kind <> 'RunJob';
drop index work_items_due;
