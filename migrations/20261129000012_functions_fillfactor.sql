-- Room on every page of `functions` for a new version of each of its rows.
--
-- The projector rewrites each row a batch touches once per batch, in one
-- transaction, and a catch-up batch touches many rows of a page. An update
-- stays on its row's page (a HOT update: no new index entry, old versions
-- pruned from the page) only if the page has room, and the versions the same
-- transaction replaced cannot be pruned before it commits. At fillfactor 50 a
-- page keeps room for a new version of every row on it. Pages written from
-- now on keep the room; `vacuum full functions` rewrites older ones.
alter table functions set (fillfactor = 50);
