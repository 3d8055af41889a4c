#!/usr/bin/env bash
# `terraform apply` with terraform-provider-sless as a user runs it, against
# a `sless dev` of its own:
#  1. one function (from a directory) applied from nothing RUNS times
#     (destroyed between runs): the apply's wall time beside the server's
#     own upload→Ready of the same function (from the audit log:
#     FunctionUploaded's time to FunctionDeployed's), and what the apply
#     adds over it;
#  2. examples/terraform (a function, two triggers, a job) from nothing,
#     RUNS times;
#  3. 20 functions in one apply at -parallelism=10: its wall time beside
#     the slowest and the sum of their upload→Ready.
# The Terraform is the current one scripts/ensure-terraform installs (TF to
# use another).
#
# Usage: scripts/bench/terraform.sh [runs=5]   (BIN_DIR: where sless and
# terraform-provider-sless are, default target/debug, built when missing)
set -euo pipefail
RUNS=${1:-5}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN_DIR=${BIN_DIR:-$ROOT/target/debug}
if [ ! -x "$BIN_DIR/sless" ] || [ ! -x "$BIN_DIR/terraform-provider-sless" ]; then
  cargo build -p sless -p sless-terraform --bin sless --bin terraform-provider-sless \
    --manifest-path "$ROOT/Cargo.toml"
fi
TF=${TF:-$("$ROOT/scripts/ensure-terraform" | tail -1)}
work=$(mktemp -d)
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
export XDG_CONFIG_HOME="$work/config"
"$BIN_DIR/sless" dev --data-dir "$work/data" --listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
echo $! >"$work/pid"
for _ in $(seq 1 300); do [ -f "$work/data/dev.json" ] && break; sleep 0.2; done
[ -f "$work/data/dev.json" ] || { cat "$work/dev.log"; exit 1; }
python3 - "$BIN_DIR" "$TF" "$work" "$RUNS" "$ROOT" <<'PY'
import json, os, shutil, statistics, subprocess, sys, time
from datetime import datetime
bin_dir, tf, work, runs, root = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sless = os.path.join(bin_dir, "sless")
dev = json.load(open(f"{work}/data/dev.json"))
rc = f"{work}/terraform.rc"
open(rc, "w").write('provider_installation {\n  dev_overrides {\n    "sless.dev/sless/sless" = "%s"\n  }\n  direct {}\n}\n' % bin_dir)
env = dict(os.environ, TF_CLI_CONFIG_FILE=rc, CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1",
           TF_INPUT="0", SLESS_ENDPOINT=dev["url"], SLESS_TOKEN=dev["token"])

HEAD = 'terraform {\n  required_providers {\n    sless = { source = "sless.dev/sless/sless" }\n  }\n}\nprovider "sless" {}\n'
HANDLER = "def handle(event):\n    return {\"ok\": True}\n"

def function(name):
    return (f'resource "sless_function" "{name}" {{\n  name = "{name}"\n  runtime = "python3.11"\n'
            f'  entrypoint = "handler.handle"\n  source_dir = "${{path.module}}/code"\n}}\n')

def terraform(d, *args):
    start = time.time()
    p = subprocess.run([tf, *args], cwd=d, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"terraform {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return (time.time() - start) * 1000.0

def apply(d, *extra):
    return terraform(d, "apply", "-auto-approve", "-input=false", "-no-color", *extra)

def destroy(d):
    terraform(d, "destroy", "-auto-approve", "-input=false", "-no-color")

def upload_to_ready(name):
    """The last life's FunctionUploaded → FunctionDeployed, in ms."""
    out = subprocess.run([sless, "events", "--function", name, "--limit", "1000", "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    at = lambda e: datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
    items = sorted(json.loads(out)["items"], key=lambda e: e["position"])
    up = max(at(e) for e in items if e["type"] == "FunctionUploaded")
    ready = max(at(e) for e in items if e["type"] == "FunctionDeployed")
    return (ready - up) * 1000.0

def workspace(name, files):
    d = f"{work}/{name}"
    os.makedirs(f"{d}/code")
    open(f"{d}/code/handler.py", "w").write(HANDLER)
    for f, text in files.items():
        open(f"{d}/{f}", "w").write(text)
    return d

def p50(xs):
    return statistics.median(xs)

# 1. One function from nothing.
one = workspace("one", {"main.tf": HEAD + function("one")})
walls, servers = [], []
for _ in range(runs):
    walls.append(apply(one))
    servers.append(upload_to_ready("one"))
    destroy(one)
added = [w - s for w, s in zip(walls, servers)]

# 2. examples/terraform from nothing.
example = f"{work}/example"
shutil.copytree(f"{root}/examples/terraform", example,
                ignore=shutil.ignore_patterns(".terraform*", "terraform.tfstate*"))
example_walls = []
for _ in range(runs):
    example_walls.append(apply(example))
    destroy(example)

# 3. Twenty functions at once.
names = [f"f{i:02d}" for i in range(20)]
many = workspace("many", {"main.tf": HEAD + "".join(function(n) for n in names)})
many_wall = apply(many, "-parallelism=10")
many_servers = [upload_to_ready(n) for n in names]
destroy(many)

tf_version = subprocess.run([tf, "version"], env=env, capture_output=True, text=True).stdout.split("\n")[0]
print(f"{tf_version}, {runs} runs each, provider from {bin_dir}")
print(f"one function, apply from nothing:  p50 {p50(walls):7.1f} ms  (max {max(walls):.1f})")
print(f"  server upload→Ready:             p50 {p50(servers):7.1f} ms")
print(f"  added by terraform + provider:   p50 {p50(added):7.1f} ms  (max {max(added):.1f})")
print(f"examples/terraform, apply:         p50 {p50(example_walls):7.1f} ms  (max {max(example_walls):.1f})")
print(f"20 functions, -parallelism=10:         {many_wall:7.1f} ms")
print(f"  slowest upload→Ready:                {max(many_servers):7.1f} ms  (ratio {many_wall / max(many_servers):.2f})")
print(f"  sum of upload→Ready:                 {sum(many_servers):7.1f} ms")
PY
