#!/usr/bin/env bash
# Every benchmark of issue 3 in one sitting, on one private PostgreSQL
# cluster with default settings (see lib.sh): builds release, runs the
# peers' comparison (peers.sh, RUNS times) and the queue's claim shapes,
# then append, projector, proxy, api, upload-accept, upload-ready, scale-out,
# jail and scale once, appends every figure as a JSON line to
# bench/results/<UTC date>.jsonl and prints a summary of the sitting.
# About 20 minutes on 2 cores with RUNS=3; run it on a quiet machine.
#
# Usage: scripts/bench/all.sh [runs=3]
# Environment: see lib.sh and peers.sh; APPEND_SECONDS (5), PROJECTOR_EVENTS
# (1000000), LOAD_SECONDS (10, each wrk run), SCALE_SIZES (100,1000,10000;
# empty skips the cost curves, about 3 minutes), SKIP_BUILD=1, SKIP_PEERS=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${1:-3}
cd "$ROOT"
started=$(date +%s)

if [ -z "${SKIP_BUILD:-}" ]; then
  log "cargo build --release -p sless -p sless-bench"
  cargo build --release -p sless -p sless-bench
fi
pg_up
record_sitting "all.sh $RUNS"
export SLESS_BENCH_SITTING=1

if [ -z "${SKIP_PEERS:-}" ]; then
  "$ROOT/scripts/bench/peers.sh" "$RUNS"
fi

log "the queue's claim in four shapes of its table, drained inside the server"
"$ROOT/scripts/bench/queue-claim-shapes.sh" 100000 "$RUNS"

log "append: 1, 4, 16 clients x distinct, command, hot, hot-read, batch, beside pgbench"
out=$(sless_bench append --concurrency 1,4,16 --duration "${APPEND_SECONDS:-5}")
record_json sless append 1 '[.runs[] | select(.mode == "distinct") | .events_per_s] | max' events/s "$out"

log "append, piece by piece: pgbench drives an INSERT, append_events, run_command and a NOTIFY"
"$ROOT/scripts/bench/append-parts.sh" "${APPEND_SECONDS:-5}"

log "projector: catch-up, replay, live lag"
out=$(sless_bench projector --events "${PROJECTOR_EVENTS:-1000000}" --streams 10000 --rate 2000 --duration 10)
record_json sless projector 1 .catch_up.events_per_s events/s "$out"

log "proxy: wrk direct, through sless, through nginx"
out=$(sless_bench proxy --sless "$SLESS_BIN" --duration "${LOAD_SECONDS:-10}" --connections 32)
record_json sless proxy 1 .sless_vs_direct ratio "$out"

log "api: 1,000 functions"
out=$(sless_bench api --sless "$SLESS_BIN" --items 1000 --duration "${LOAD_SECONDS:-10}" --connections 32)
record_json sless api 1 .get.req_per_s req/s "$out"

log "upload-accept: one 10 MiB zip at a time, then four at once"
out=$(sless_bench upload-accept --sless "$SLESS_BIN")
record_json sless upload-accept 1 .sless_dev.single_best_mib_per_s MiB/s "$out"

log "upload-ready: 20 uploads"
out=$(sless_bench upload-ready --sless "$SLESS_BIN" --items 20 --sandbox on)
record_json sless upload-ready 1 .p50_ms ms "$out"

log "scale-out: a step from 0 to 64 callers of a 100 ms function, at most 16 instances"
out=$(sless_bench scale-out --sless "$SLESS_BIN")
record_json sless scale-out 1 .step.to_90pct_of_ideal_s s "$out"

log "logs: lines ingested per second beside the bare rows, the tail's delay, the proxy printing and quiet"
out=$(sless_bench logs --sless "$SLESS_BIN")
record_json sless logs 1 '[.ingest.insert[] | select(.target == "function_logs::insert" and .writers == 1)][0].lines_per_s' lines/s "$out"

log "jail: a process started directly and in the sandbox"
out=$(sless_bench jail --runs 50)
record_json sless jail 1 '."python3 -c pass".added_p50_ms' ms "$out"

SCALE_SIZES=${SCALE_SIZES-100,1000,10000}
if [ -n "$SCALE_SIZES" ]; then
  log "scale: cost curves for $SCALE_SIZES functions, in one namespace and over 100"
  out=$(sless_bench scale --sless "$SLESS_BIN" --sizes "$SCALE_SIZES" --layouts one,spread)
  record_json sless scale 1 '[.runs[] | select(.layout == "one")] | last | .restart.all_reconciled_s' s "$out"
fi

log "done in $(( ($(date +%s) - started) / 60 )) min; results in $RESULTS"
"$ROOT/scripts/bench/summary.sh" "$RESULTS"
