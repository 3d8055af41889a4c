-- Replay: rebuilding the read models from the log (projector/src/replay.rs).
--
-- A replay builds fresh copies of the read-model tables, then swaps them in
-- while it holds the projector's checkpoint row. It bumps `generation` on
-- that row in the same transaction: a projector that remembers rows it
-- wrote compares the generation it last saw, and forgets them when the
-- tables were swapped under it.
alter table projector_checkpoints add column generation bigint not null default 0;

-- One row per replay, the last one first to be asked about: what it is
-- doing or what it found. Written by the replay itself; a replay whose
-- process died shows as `running` until the next one starts, which marks
-- it `abandoned` (a running replay holds an advisory lock; see replay.rs).
create table replays (
    id           bigint generated always as identity primary key,
    -- `replay` (rebuild and swap) or `verify` (rebuild and compare only).
    mode         text not null check (mode in ('replay', 'verify')),
    -- `running`, `equal`, `differs`, `failed` or `abandoned`.
    state        text not null default 'running',
    requested_by text not null,
    started_at   timestamptz not null default now(),
    finished_at  timestamptz,
    -- Events applied so far, and the events up to the checkpoint it aims for.
    applied      bigint not null default 0,
    total        bigint not null default 0,
    -- The live projector's checkpoint the rebuilt tables were brought to.
    position     bigint,
    -- Per read model: {"table": {"rebuilt": md5, "live": md5, "rows": n}}.
    checksums    jsonb,
    error        text
);
