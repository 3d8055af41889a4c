-- Blobs stored ahead of the event that will name them (store/src/orphans.rs).
-- An upload records each key here, in a statement of its own, before it
-- puts the blob in S3; the transaction that appends the event naming the
-- blob deletes the record. A record older than the grace period names a
-- blob whose event never came (the append lost a race, the API died, the
-- client went away): the workers' orphan sweep deletes that blob unless a
-- kept version uses the same bytes. Rows live for the length of an upload,
-- so the table stays as small as the number of uploads in flight.
create table blobs_in_flight (
    key       text primary key,
    stored_at timestamptz not null default now()
);

create index blobs_in_flight_stored_at on blobs_in_flight (stored_at);
