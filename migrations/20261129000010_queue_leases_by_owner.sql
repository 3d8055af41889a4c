-- Leases are extended per worker (one statement for every item a worker
-- holds) and expired leases are found through the index of running items
-- (work_items_one_running_per_key covers exactly the running rows), so the
-- lease index only cost an index insertion on every claim.
drop index work_items_leases;
