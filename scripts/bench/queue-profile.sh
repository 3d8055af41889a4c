#!/usr/bin/env bash
# Where the queue drain's database time goes: a cluster of its own with
# pg_stat_statements (the scripts' defaults otherwise), one
# `sless-bench queue-drain`, then the statements by total execution time.
# Enqueueing the items (before the drain's clock starts) is in the table too.
#
# Usage: scripts/bench/queue-profile.sh [items=100000] [concurrency=16]
set -euo pipefail
export SLESS_BENCH_PG=${SLESS_BENCH_PROFILE_PG:-/tmp/sless-bench-pg-profile}
export SLESS_BENCH_PGPORT=${SLESS_BENCH_PROFILE_PGPORT:-5440}
source "$(dirname "$0")/lib.sh"
ITEMS=${1:-100000}
CONCURRENCY=${2:-16}
cd "$ROOT"
pg_up
psql -d postgres -qAt -c "alter system set shared_preload_libraries = 'pg_stat_statements'" >/dev/null
as_pg "$PG_BIN/pg_ctl -D $PG_BASE/data -w restart" >/dev/null
psql -d postgres -qAt -c "create extension if not exists pg_stat_statements" -c "select pg_stat_statements_reset()" >/dev/null
"$BENCH" queue-drain --items "$ITEMS" --concurrency "$CONCURRENCY" 2>&1 | grep -v '^{'
psql -d postgres -P pager=off -c "
  select round(total_exec_time::numeric, 0) as total_ms,
         round((100 * total_exec_time / sum(total_exec_time) over ())::numeric, 1) as pct,
         calls, rows,
         round((1000 * total_exec_time / nullif(rows, 0))::numeric, 1) as us_per_row,
         left(regexp_replace(query, '\s+', ' ', 'g'), 90) as statement
  from pg_stat_statements
  where query !~* '^\s*(begin|commit|rollback|set |show |select pg_stat_statements|drop |create |checkpoint|vacuum|alter |--)'
  order by total_exec_time desc limit 12"
