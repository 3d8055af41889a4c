-- Why a call failed, as a word a program can test (`oom`, `crashed`,
-- `timeout`, `unreachable`, `too-large`, `exited`, ...); `error` keeps the
-- sentence for people. Null for a call that did not fail.
alter table invocations add column error_kind text;
