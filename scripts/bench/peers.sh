#!/usr/bin/env bash
# Queue drain and pickup latency of sless beside graphile-worker and pg-boss,
# in one sitting on ONE private PostgreSQL cluster with default settings,
# interleaved: run 1 of every tool, then run 2, ... (the order rotates each
# run so no tool always goes first). Appends JSON lines to the results file
# (bench/results/<UTC date>.jsonl) and prints a summary of this sitting.
#
#   drain:  100,000 no-op jobs at concurrency 16: graphile-worker "batched"
#           (localQueue 500, completeJobBatchDelay 0), pg-boss batchSize 100 +
#           burstWhenBatchFull, `sless-bench queue-drain`.
#   pickup: an idle worker, 500 jobs enqueued one at a time 10 ms apart:
#           graphile-worker (defaults and batched), pg-boss (LISTEN/NOTIFY),
#           `sless-bench pickup`.
#
# Usage: scripts/bench/peers.sh [runs=3]
# Needs: target/release/sless-bench (cargo build --release -p sless-bench),
# the peers' node scripts (../shared/bench/peers/node, copied and installed
# with `npm ci` on first use; it downloads a Node 22 binary package), jq.
# Environment: see lib.sh; JOBS (100000), CONCURRENCY (16), PICKUPS (500),
# GAP_MS (10).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${1:-3}
JOBS=${JOBS:-100000}
CONCURRENCY=${CONCURRENCY:-16}
PICKUPS=${PICKUPS:-500}
GAP_MS=${GAP_MS:-10}

[ -x "$BENCH" ] || { echo "no $BENCH: cargo build --release -p sless-bench" >&2; exit 2; }

# The peers' node scripts, copied somewhere writable and installed once.
prepare_peers() {
  local src="$PEERS_SRC/node" dst="$PEERS_WORK/node"
  [ -f "$src/package-lock.json" ] || { echo "peers' scripts not found in $src (set PEERS_SRC)" >&2; exit 2; }
  mkdir -p "$dst"
  if [ ! -x "$NODE" ] || ! cmp -s "$src/package-lock.json" "$dst/package-lock.json"; then
    cp "$src/package.json" "$src/package-lock.json" "$dst/"
    log "npm ci in $dst"
    (cd "$dst" && npm ci --no-audit --no-fund --loglevel=error) >&2
  fi
  cp "$src"/*.mjs "$dst/"
}

peer() { # TOOL-SCRIPT DB ARGS...: one run of a peer; it appends its own line to $RESULTS
  local script=$1 db=$2; shift 2
  recreate_db "$db"
  (cd "$PEERS_WORK/node" && timeout 300 "$NODE" "$script" "$@" --db "$db") | { grep -v '^RESULT ' || true; } >&2
}

drain() { # TOOL RUN
  case $1 in
    graphile) peer graphile.mjs bench_graphile drain --jobs "$JOBS" --concurrency "$CONCURRENCY" --config batched --run "$2" ;;
    pgboss)   peer pgboss.mjs bench_pgboss drain --jobs "$JOBS" --concurrency "$CONCURRENCY" --batch 100 --run "$2" ;;
    sless)
      local out
      out=$(sless_bench queue-drain --items "$JOBS" --concurrency "$CONCURRENCY")
      record_json sless "drain_c${CONCURRENCY}_$((JOBS / 1000))k" "$2" .jobs_per_s jobs/s "$out" ;;
  esac
}

pickup() { # TOOL RUN
  case $1 in
    graphile)
      for cfg in default batched; do
        peer graphile.mjs bench_graphile latency --count "$PICKUPS" --gap-ms "$GAP_MS" --concurrency 8 --config $cfg --run "$2"
      done ;;
    pgboss) peer pgboss.mjs bench_pgboss latency --count "$PICKUPS" --gap-ms "$GAP_MS" --concurrency 8 --config notify --run "$2" ;;
    sless)
      local out
      out=$(sless_bench pickup --items "$PICKUPS" --interval-ms "$GAP_MS")
      # Ours is measured from the enqueue's commit: the peers' commit_to_start.
      out=$(jq -c '. + {commit_to_start: {p50_ms: .p50_ms, p99_ms: .p99_ms}}' <<<"$out")
      record_json sless latency "$2" .p50_ms ms_p50 "$out" ;;
  esac
}

pg_up
prepare_peers
[ -n "${SLESS_BENCH_SITTING:-}" ] || record_sitting "peers.sh $RUNS"
tools=(graphile pgboss sless)
for run in $(seq 1 "$RUNS"); do
  for i in 0 1 2; do
    t=${tools[$(((run - 1 + i) % 3))]}
    log "run $run/$RUNS: drain $JOBS jobs, $t"
    drain "$t" "$run"
  done
  for i in 0 1 2; do
    t=${tools[$(((run - 1 + i) % 3))]}
    log "run $run/$RUNS: pickup, $t"
    pickup "$t" "$run"
  done
done
for db in bench_graphile bench_pgboss; do
  psql -d postgres -qAt -c "drop database if exists $db with (force)"
done
[ -n "${SLESS_BENCH_SITTING:-}" ] || "$(dirname "$0")/summary.sh" "$RESULTS"
