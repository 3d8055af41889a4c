#!/usr/bin/env bash
# What the shape of the queue's table does to a claim: the same drain (claim
# 256 due items with FOR UPDATE SKIP LOCKED, then delete them, each a
# transaction of its own, until none is left) run by a procedure inside the
# server (no client, no network) over four shapes of the table, on a scratch
# database of the scripts' cluster (lib.sh):
#   today        work_items as migrated: `state` in every partial index, so a
#                claim writes a new tuple and index entries (the primary key,
#                the running-per-key index)
#   hot          pending order in a table of its own (one row per pending
#                key), work_items with no index on `state` and fillfactor 50:
#                the claim deletes the due rows (found again by key) and its
#                UPDATE of work_items is HOT
#   hot-tid      as `hot`, the due rows deleted by their ctid
#   hot-noprobe  as `hot-tid` without the probe for a running item of the
#                same key: NOT a correct queue (two items of one key could
#                run at once); the bound of what the probe costs
# Prints, per shape and run, the seconds spent claiming and acknowledging
# and the share of HOT updates.
#
# Usage: scripts/bench/queue-claim-shapes.sh [items=100000] [runs=2]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ITEMS=${1:-100000}
RUNS=${2:-2}
cd "$ROOT"
pg_up
export PGOPTIONS="-c client_min_messages=warning"
recreate_db queue_shapes

columns="id bigint generated always as identity primary key, kind text not null, key text not null,
    payload jsonb not null default '{}'::jsonb,
    state text not null default 'pending' check (state in ('pending', 'running')),
    run_at timestamptz not null default now(), attempts integer not null default 0,
    max_attempts integer not null default 8, lease_owner text, lease_until timestamptz,
    last_error text, created_at timestamptz not null default now()"

# The acknowledgement: queue::complete_many's statement.
ack="delete from work_items w using unnest(ids, atts) as a(id, attempt)
      where w.id = a.id and w.attempts = a.attempt and w.lease_owner = 'me' and w.state = 'running'"
claim_update="update work_items w set state = 'running', attempts = w.attempts + 1, lease_owner = 'me',
        lease_until = now() + make_interval(secs => 30)"
probe="and not exists (select 1 from work_items r where r.key = %s and r.state = 'running' offset 0)"

# $1: the claim (a statement that sets `ids` and `atts`).
drain_procedure() {
  cat <<EOF
create or replace procedure drain(inout report text default null) language plpgsql as \$\$
declare ids bigint[]; atts int[]; claiming interval := '0'; acking interval := '0'; t0 timestamptz;
begin
  loop
    t0 := clock_timestamp();
    $1
    commit;
    claiming := claiming + (clock_timestamp() - t0);
    exit when ids is null;
    t0 := clock_timestamp();
    $ack;
    commit;
    acking := acking + (clock_timestamp() - t0);
  end loop;
  report := format('%s %s', extract(epoch from claiming), extract(epoch from acking));
end \$\$;
EOF
}

today() {
  cat <<EOF
create table work_items ($columns);
create unique index on work_items (key) where state = 'pending';
create unique index on work_items (key) where state = 'running';
create index on work_items (run_at, id) where state = 'pending' and kind = 'RunJob';
create index on work_items (run_at, id) where state = 'pending' and kind <> 'RunJob';
insert into work_items (kind, key) select 'Noop', 'noop/' || g from generate_series(1, $ITEMS) g;
EOF
  drain_procedure "with due as (
      select id from work_items w where state = 'pending' and run_at <= now() and w.kind <> 'RunJob'
        $(printf "$probe" w.key)
      order by run_at, id limit 256 for update skip locked),
    claimed as ($claim_update from due where w.id = due.id returning w.id, w.attempts)
    select array_agg(id), array_agg(attempts) into ids, atts from claimed;"
}

# $1: how the due rows are found again to delete them; $2: the probe, or nothing.
hot() {
  cat <<EOF
create table work_items ($columns) with (fillfactor = 50);
create index on work_items (key);
create table work_due (key text primary key, item bigint not null, kind text not null, run_at timestamptz not null);
create index on work_due (run_at, item) where kind = 'RunJob';
create index on work_due (run_at, item) where kind <> 'RunJob';
with i as (insert into work_items (kind, key) select 'Noop', 'noop/' || g from generate_series(1, $ITEMS) g
           returning id, key, kind, run_at)
insert into work_due select key, id, kind, run_at from i;
EOF
  drain_procedure "with due as (
      select d.key, d.ctid as tid, d.item from work_due d where d.run_at <= now() and d.kind <> 'RunJob'
        $2
      order by d.run_at, d.item limit 256 for update skip locked),
    gone as (delete from work_due d where $1 returning d.item),
    claimed as ($claim_update from gone where w.id = gone.item returning w.id, w.attempts)
    select array_agg(id), array_agg(attempts) into ids, atts from claimed;"
}

shape() {
  case $1 in
    today) today ;;
    hot) hot "d.key in (select key from due)" "$(printf "$probe" d.key)" ;;
    hot-tid) hot "d.ctid = any(array(select tid from due))" "$(printf "$probe" d.key)" ;;
    hot-noprobe) hot "d.ctid = any(array(select tid from due))" "" ;;
  esac
}

echo "| shape | run | claim s | ack s | claim µs/item | HOT share of claims |"
echo "|---|---:|---:|---:|---:|---:|"
for run in $(seq "$RUNS"); do
  for s in today hot hot-tid hot-noprobe; do
    psql -d queue_shapes -qAt -c "drop table if exists work_items, work_due" -c "drop procedure if exists drain" >/dev/null
    shape "$s" | psql -d queue_shapes -qAt -v ON_ERROR_STOP=1 >/dev/null
    psql -d queue_shapes -qAt -c "vacuum analyze" -c checkpoint >/dev/null
    read -r claim acked < <(psql -d queue_shapes -qAt -c "call drain()")
    hot_share=$(psql -d queue_shapes -qAt -c "select coalesce(round(100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0)), 0) || '%'
        from pg_stat_user_tables where relname = 'work_items'")
    awk -v s="$s" -v r="$run" -v c="$claim" -v a="$acked" -v n="$ITEMS" -v h="$hot_share" \
      'BEGIN { printf "| %s | %d | %.3f | %.3f | %.1f | %s |\n", s, r, c, a, 1e6 * c / n, h }'
  done
done
