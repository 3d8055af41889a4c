#!/usr/bin/env bash
# `sless deploy` as a user runs it: starts a `sless dev` of its own, then
# deploys a copy of examples/hello-python RUNS times, each time with a
# changed handler.py, and prints the p50 (and max) of the command's wall
# time beside the server's own upload→Ready for the same runs (from the
# audit log: FunctionUploaded's time to FunctionDeployed's), and what the
# command adds over it.
#
# Usage: scripts/bench/cli-deploy.sh [runs=10]   (BIN: the sless binary,
# default target/release/sless, built when missing)
set -euo pipefail
RUNS=${1:-10}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN=${BIN:-$ROOT/target/release/sless}
[ -x "$BIN" ] || cargo build --release -p sless --manifest-path "$ROOT/Cargo.toml"
work=$(mktemp -d)
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
export XDG_CONFIG_HOME="$work/config"
"$BIN" dev --data-dir "$work/data" --listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
echo $! >"$work/pid"
for _ in $(seq 1 300); do [ -f "$work/data/dev.json" ] && break; sleep 0.2; done
[ -f "$work/data/dev.json" ] || { cat "$work/dev.log"; exit 1; }
cp -r "$ROOT/examples/hello-python" "$work/fn"
sed -i 's/^name = .*/name = "bench"/' "$work/fn/sless.toml"
for i in $(seq 0 "$RUNS"); do
  printf 'def handle(event):\n    return {"run": %d}\n' "$i" >"$work/fn/handler.py"
  start=$(date +%s%N)
  "$BIN" deploy "$work/fn" -o json >"$work/run-$i.json"
  end=$(date +%s%N)
  echo $(( (end - start) / 1000 )) >"$work/wall-$i"
done
"$BIN" events --function bench --limit 1000 -o json >"$work/events.json"
python3 - "$work" "$RUNS" <<'PY'
import json, sys, statistics
from datetime import datetime
work, runs = sys.argv[1], int(sys.argv[2])
events = json.load(open(f"{work}/events.json"))["items"]
at = lambda e: datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
uploaded = {e["data"]["version"]: at(e) for e in events if e["type"] == "FunctionUploaded"}
ready = {e["data"]["version"]: at(e) for e in events if e["type"] == "FunctionDeployed"}
wall, server = [], []
for i in range(1, runs + 1):  # run 0 creates the function: left out
    v = json.load(open(f"{work}/run-{i}.json"))["version"]
    wall.append(int(open(f"{work}/wall-{i}").read()) / 1000.0)
    server.append((ready[v] - uploaded[v]) * 1000.0)
p50 = statistics.median
print(f"sless deploy, {runs} runs of a changed file:")
print(f"  command wall time   p50 {p50(wall):7.1f} ms   max {max(wall):7.1f} ms")
print(f"  server upload→Ready p50 {p50(server):7.1f} ms   max {max(server):7.1f} ms")
print(f"  added by the command (p50 of wall − upload→Ready) {p50([w - s for w, s in zip(wall, server)]):6.1f} ms")
PY
