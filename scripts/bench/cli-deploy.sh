#!/usr/bin/env bash
# `sless deploy` as a user runs it: starts a `sless dev` of its own, then
# deploys a copy of examples/hello-python RUNS times, each time with a
# changed handler.py, and prints the p50 (and max) of the command's wall
# time beside the server's own upload→Ready for the same runs (from the
# audit log: FunctionUploaded's time to FunctionDeployed's), and what the
# command adds over it.
#
# Then how late a build-log line reaches the terminal: the first line of
# each of those builds, from BuildStarted's time (the line is written after
# it, so this is an upper bound) to the moment `deploy`'s output shows it;
# and RUNS builds of a Node.js function whose package's install prints the
# time it prints the line, to the moment that line is shown.
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
mkdir "$work/node"
printf 'exports.handle = async () => ({ ok: true });\n' >"$work/node/handler.js"
printf 'name = "bench-node"\nruntime = "nodejs20"\n' >"$work/node/sless.toml"
python3 - "$BIN" "$work" "$RUNS" <<'PY'
import json, re, statistics, subprocess, sys, time
from datetime import datetime
sless, work, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def deploy(path):
    """Runs `sless deploy PATH` as a user would, with its output piped:
    its wall time (ms), each line with the time it was read, the version."""
    start = time.time()
    p = subprocess.Popen([sless, "deploy", path], stdout=subprocess.PIPE, text=True, bufsize=1)
    lines = [(time.time(), line.rstrip("\n")) for line in p.stdout]
    if p.wait() != 0:
        sys.exit(f"sless deploy {path} failed: {lines}")
    wall = (time.time() - start) * 1000.0
    version = next(int(m.group(1)) for _, l in lines if (m := re.search(r"version (\d+) is Ready", l)))
    return wall, lines, version

def events(name):
    out = subprocess.run([sless, "events", "--function", name, "--limit", "1000", "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    at = lambda e: datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
    by = {}
    for e in json.loads(out)["items"]:
        by.setdefault(e["type"], {})[e["data"].get("version")] = at(e)
    return by

python = []
for i in range(runs + 1):  # run 0 creates the function: left out
    open(f"{work}/fn/handler.py", "w").write(f"def handle(event):\n    return {{\"run\": {i}}}\n")
    python.append(deploy(f"{work}/fn"))
ev = events("bench")
wall, server, first = [], [], []
for w, lines, v in python[1:]:
    wall.append(w)
    server.append((ev["FunctionDeployed"][v] - ev["FunctionUploaded"][v]) * 1000.0)
    shown = next(t for t, l in lines if l.startswith("  | "))
    first.append((shown - ev["BuildStarted"][v]) * 1000.0)

node = []
for i in range(runs):
    script = "node -e \"console.log('written-at ' + Date.now())\""
    open(f"{work}/node/package.json", "w").write(json.dumps(
        {"name": "bench-node", "version": f"1.0.{i}", "private": True, "scripts": {"postinstall": script}}))
    _, lines, _ = deploy(f"{work}/node")
    t, l = next((t, l) for t, l in lines if re.search(r"^  \| written-at \d+$", l))
    node.append(t * 1000.0 - int(l.rsplit(" ", 1)[1]))

p50 = statistics.median
print(f"sless deploy, {runs} runs of a changed file:")
print(f"  command wall time   p50 {p50(wall):7.1f} ms   max {max(wall):7.1f} ms")
print(f"  server upload→Ready p50 {p50(server):7.1f} ms   max {max(server):7.1f} ms")
print(f"  added by the command (p50 of wall − upload→Ready) {p50([w - s for w, s in zip(wall, server)]):6.1f} ms")
print("build-log lines, written → shown by sless deploy:")
print(f"  first line (from BuildStarted) p50 {p50(first):7.1f} ms   max {max(first):7.1f} ms")
print(f"  a line npm's install prints    p50 {p50(node):7.1f} ms   max {max(node):7.1f} ms")
PY
