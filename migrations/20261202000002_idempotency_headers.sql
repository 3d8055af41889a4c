-- The headers of a command's first answer (its ETag, a create's Location),
-- so that a retry with the same Idempotency-Key gets them again too.
alter table idempotency_keys add column headers jsonb not null default '{}'::jsonb;
