#!/usr/bin/env bash
# Summarises one sitting of a results file (the lines after its last
# "sitting start" marker; --all for every line) as markdown: medians with
# [min–max] over the runs, ours/peer ratios, and each issue-3 target beside
# its figure.
# Usage: scripts/bench/summary.sh [results.jsonl] [--all]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
FILE=${1:-$RESULTS}
exec python3 - "$FILE" "${2:-}" <<'PY'
import json, statistics, sys
from collections import defaultdict

path, every = sys.argv[1], sys.argv[2] == "--all"
rows = [json.loads(l) for l in open(path) if l.strip()]
if not every:
    marks = [i for i, r in enumerate(rows) if r["tool"] == "sitting"]
    rows = rows[marks[-1]:] if marks else rows

def fmt(x):
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"

def mmm(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    return fmt(m) if len(vals) == 1 else f"{fmt(m)} [{fmt(min(vals))}–{fmt(max(vals))}]"

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None

def ratio(a, b):
    return a / b if a is not None and b else None

groups = defaultdict(list)
for r in rows:
    groups[(r["tool"], r["scenario"])].append(r)

sitting = [r for r in rows if r["tool"] == "sitting"]
if sitting:
    e = sitting[-1]["extra"]
    pg = e.get("postgres", {})
    print(f"Sitting {sitting[-1]['ts']} ({e.get('what')}): {e.get('cores')} cores ({e.get('cpu')}), "
          f"{e.get('memory')}, kernel {e.get('kernel')}; commit {e.get('commit')}"
          f"{' with uncommitted changes' if e.get('uncommitted_changes') else ''}.")
    print("PostgreSQL " + ", ".join(f"{k}={v}" for k, v in sorted(pg.items())) + "\n")

drains = [k for k, g in groups.items() if g[0]["unit"] == "jobs/s"]
if drains:
    print("### Queue drain (jobs/s, median [min–max])\n")
    print("| tool | scenario | jobs/s | runs |\n|---|---|---:|---:|")
    for k in drains:
        print(f"| {k[0]} | {k[1]} | {mmm([r['value'] for r in groups[k]])} | {len(groups[k])} |")
    ours = [k for k in drains if k[0] == "sless"]
    if ours:
        o = med([r["value"] for r in groups[ours[0]]])
        print()
        for k in drains:
            if k[0] != "sless":
                p = med([r["value"] for r in groups[k]])
                print(f"- sless / {k[0]} {k[1]}: **{fmt(ratio(o, p))}x** "
                      "(target: ahead of the best peer, goal 2x)")
    print()

lat = [k for k, g in groups.items() if g[0]["unit"] == "ms_p50"]
if lat:
    print("### Pickup latency (ms, median [min–max]; lower is better)\n")
    print("| tool | scenario | enqueue call → start p50 | p99 | commit → start p50 | commit → start p99 | runs |")
    print("|---|---|---:|---:|---:|---:|---:|")
    def c2s(r, q):
        return (r["extra"].get("commit_to_start") or {}).get(q)
    for k in lat:
        g = groups[k]
        first = "-" if k[0] == "sless" else mmm([r["extra"]["p50_ms"] for r in g])
        p99 = "-" if k[0] == "sless" else mmm([r["extra"]["p99_ms"] for r in g])
        print(f"| {k[0]} | {k[1]} | {first} | {p99} | {mmm([c2s(r, 'p50_ms') for r in g])} "
              f"| {mmm([c2s(r, 'p99_ms') for r in g])} | {len(g)} |")
    ours = [k for k in lat if k[0] == "sless"]
    if ours:
        o50 = med([c2s(r, "p50_ms") for r in groups[ours[0]]])
        o99 = med([c2s(r, "p99_ms") for r in groups[ours[0]]])
        print(f"\nsless: p50 {fmt(o50)} ms, p99 {fmt(o99)} ms from commit (target p50 ≤ 2, p99 ≤ 5, below the best peer)")
        for k in lat:
            if k[0] != "sless":
                g = groups[k]
                print(f"- sless / {k[0]} {k[1]}, commit → start: p50 {fmt(ratio(o50, med([c2s(r, 'p50_ms') for r in g])))}x, "
                      f"p99 {fmt(ratio(o99, med([c2s(r, 'p99_ms') for r in g])))}x; "
                      f"against its enqueue call → start: p50 {fmt(ratio(o50, med([r['extra']['p50_ms'] for r in g])))}x, "
                      f"p99 {fmt(ratio(o99, med([r['extra']['p99_ms'] for r in g])))}x")
    print()

def extras(scenario):
    return [r["extra"] for r in groups.get(("sless", scenario), [])]

if extras("append"):
    print("### Event-log appends (events/s) beside pgbench, one-row INSERT per transaction (tps), same clients and seconds\n")
    print("| clients | mode | events/s | pgbench tps | append / pgbench |\n|---:|---|---:|---:|---:|")
    cells = defaultdict(list)
    for x in extras("append"):
        for r in x["runs"]:
            cells[(r["concurrency"], r["mode"])].append(r)
    order = {"distinct": 0, "held": 1, "command": 2, "hot": 3, "hot-read": 4, "batch": 5}
    for (c, m), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9))):
        print(f"| {c} | {m} | {mmm([r['events_per_s'] for r in rs])} | "
              f"{mmm([r.get('pgbench_tps') for r in rs])} | {mmm([r.get('vs_pgbench') for r in rs])} |")
    bvs = defaultdict(list)
    for x in extras("append"):
        for b in x["batch_vs_single"]:
            bvs[b["concurrency"]].append(b["ratio"])
    print("\nTargets: single-event appends ≥ 0.6x pgbench; a hot stream at 16 clients ≥ 1,000 events/s; batched ≥ 5x single. Batched / single: "
          + ", ".join(f"{c} clients {mmm(v)}x" for c, v in sorted(bvs.items())) + "\n")

if extras("projector"):
    xs = extras("projector")
    cu = [x["catch_up"]["events_per_s"] for x in xs if "catch_up" in x]
    rp = [x["replay"]["seconds"] for x in xs if "replay" in x]
    same = all(x["replay"]["identical"] for x in xs if "replay" in x)
    lg = [x["lag"] for x in xs if "lag" in x]
    print("### Projector\n")
    print(f"- catch-up over {xs[0].get('events', '?'):,} events: {mmm(cu)} events/s (target ≥ 50,000)")
    print(f"- replay from zero of the same log: {mmm(rp)} s (read models identical: {same})")
    if lg:
        print(f"- live lag at {lg[0]['rate']:,}/s appends: p50 {mmm([l['p50_ms'] for l in lg])} ms, "
              f"p99 {mmm([l['p99_ms'] for l in lg])} ms (target p99 ≤ 50), "
              f"{sum(l['missing'] for l in lg)} never applied")
    print()

if extras("proxy"):
    xs = extras("proxy")
    print(f"### Invoke proxy (wrk, {xs[0]['connections']} connections, python function)\n")
    print("| path | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|")
    for k, label in (("direct", "direct"), ("via_sless", "through /fn (sless)"), ("via_nginx", "through nginx")):
        print(f"| {label} | {mmm([x[k]['req_per_s'] for x in xs])} | {mmm([x[k]['p50_ms'] for x in xs])} "
              f"| {mmm([x[k]['p99_ms'] for x in xs])} |")
    print(f"\n- sless / direct: {mmm([x['sless_vs_direct'] for x in xs])}x req/s (target ≥ 0.95); added p50 "
          f"{mmm([x['added_p50_ms'] for x in xs])} ms, added p99 {mmm([x['added_p99_ms'] for x in xs])} ms (target ≤ 1)")
    print(f"- sless / nginx: {mmm([x['sless_vs_nginx'] for x in xs])}x req/s (target ≥ 1)")
    pc = [x["paced"] for x in xs if x.get("paced")]
    if pc:
        print(f"- paced, all three at the same open load (~{mmm([p['rate'] for p in pc])} req/s): "
              f"p50 / p99 direct {mmm([p['direct']['p50_ms'] for p in pc])} / {mmm([p['direct']['p99_ms'] for p in pc])} ms; "
              f"added through sless {mmm([p['added_p50_ms'] for p in pc])} / {mmm([p['added_p99_ms'] for p in pc])} ms "
              f"(target p99 ≤ 1); through nginx {mmm([p['nginx_added_p50_ms'] for p in pc])} / "
              f"{mmm([p['nginx_added_p99_ms'] for p in pc])} ms")
    m = xs[-1]["memory_kib"]
    own = lambda k: f", its own {m[k]['anon_kib'] / 1024:.1f} MiB" if "anon_kib" in m[k] else ""
    print(f"- sless dev memory: idle RSS {m['idle']['rss_kib'] / 1024:.1f} MiB (peak {m['idle']['peak_kib'] / 1024:.1f}{own('idle')}), "
          f"after the proxy load RSS {m['after_proxy_load']['rss_kib'] / 1024:.1f} MiB "
          f"(peak {m['after_proxy_load']['peak_kib'] / 1024:.1f}{own('after_proxy_load')}; target ≤ 40)\n")

if extras("api"):
    xs = extras("api")
    print(f"### Control-plane API ({xs[0]['functions']:,} functions, {xs[0]['connections']} connections)\n")
    print("| request | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|")
    for k, label in (("page_100", "GET .../functions?limit=100 (target ≥ 3,000)"),
                     ("page_1000", "GET .../functions?limit=1000 (target ≥ 1,000)"),
                     ("get", "GET .../functions/{name}")):
        print(f"| {label} | {mmm([x[k]['req_per_s'] for x in xs])} | {mmm([x[k]['p50_ms'] for x in xs])} "
              f"| {mmm([x[k]['p99_ms'] for x in xs])} |")
    print()

if extras("upload-accept"):
    x = extras("upload-accept")[-1]["sless_dev"]
    print("### Large uploads accepted (10 MiB zips)\n")
    print(f"- one at a time: {', '.join(f'{ms:.0f}' for ms in x['single_ms'])} ms "
          f"(best {x['single_best_mib_per_s']:.1f} MiB/s; target ≤ 1,000 ms)")
    print(f"- {x['concurrent']} at once: all accepted in {x['concurrent_wall_ms']:.0f} ms, "
          f"{x['concurrent_mib_per_s']:.1f} MiB/s together\n")

if extras("upload-ready"):
    xs = extras("upload-ready")
    print(f"### Upload → Ready ({xs[0]['uploads']} uploads of a python function without dependencies)\n")
    print(f"- p50 {mmm([x['p50_ms'] for x in xs])} ms (target ≤ 1,500), p99 {mmm([x['p99_ms'] for x in xs])} ms, "
          f"max {mmm([x['max_ms'] for x in xs])} ms\n")

if extras("jail"):
    xs = extras("jail")
    print(f"### A process's start, directly and in the sandbox ({xs[0]['runs']} starts each, limits: {xs[0]['limits']})\n")
    print("| program | direct p50 ms | in a jail p50 ms | added p50 ms |\n|---|---:|---:|---:|")
    for k in ("python3 -c pass", "/bin/true"):
        print(f"| `{k}` | {mmm([x[k]['direct']['p50_ms'] for x in xs])} | {mmm([x[k]['jailed']['p50_ms'] for x in xs])} "
              f"| {mmm([x[k]['added_p50_ms'] for x in xs])} |")
    print()

if extras("scale"):
    x = extras("scale")[-1]
    print("### Cost curves (`sless-bench scale`)\n")
    print("| layout | functions | create/s | list p50 ms | audit p50 ms | reconciled s | replay s | B/function | RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in x["runs"]:
        print(f"| {r['layout']} | {r['functions']:,} | {r['create']['per_s']:.0f} | {r['list']['first']['p50_ms']:.2f} "
              f"| {r['audit']['newest']['p50_ms']:.2f} | {r['restart']['all_reconciled_s']:.2f} | {r['replay']['seconds']:.2f} "
              f"| {r['db']['bytes_per_function']:.0f} | {r['memory']['rss_kib'] / 1024:.1f} |")
    for layout, g in x["growth"].items():
        worse = [k for k, m in g["measures"].items() if m["class"] == "worse than linear"]
        print(f"- {layout}, {g['from']:.0f} → {g['to']:.0f}: worse than linear: {', '.join(worse) or 'none'}")
    print()
PY
