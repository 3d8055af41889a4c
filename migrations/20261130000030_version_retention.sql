-- Version history: the runtime each version was packed for, and lookups of
-- the versions that still use a blob (retention deletes a blob only when
-- none does).
alter table function_versions add column runtime text;

create index function_versions_zip_key on function_versions (zip_key);
create index function_versions_context_key on function_versions (context_key);
