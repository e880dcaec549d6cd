#!/usr/bin/env python3
"""Render the `nemesis-slow` part of docs/RESULTS.md: every system under the
link proxy's faults (`--faults delay,slow`), one row per system and class,
then DART's litmus run over processes with network faults on its workers.

Usage: render_nemesis_slow.py NEMESIS_COMMAND DART_JSON DART_COMMAND SYSTEM=FILE...
(NEMESIS_COMMAND has SYS where the system goes)."""
import json
import statistics
import sys

nemesis_command, dart_json, dart_command = sys.argv[1:4]
pairs = [a.split("=", 1) for a in sys.argv[4:]]


def ms(xs):
    return f"{statistics.median(xs):.0f} / {max(xs):.0f}" if xs else "–"


print("<!-- part nemesis-slow -->")
print("### Delay and slow nodes, through the link proxy\n")
print("Every system under `delay` (one node's links or all, 10–50 ms and a jitter up to as much) "
      "and `slow` (one node's links 100–400 ms; half-way its packets to the manager vanish, so it is "
      "suspected while alive and serving), through the proxy docs/NEMESIS.md describes.\n")
print(f"```\n{nemesis_command}\n```\n")
print("| system | fault class | faults | schedules failed | operations | back after the heal, ms (median / max) | all serving again, ms (median / max) |")
print("|---|---|---:|---:|---:|---:|---:|")
for system, path in pairs:
    runs = json.load(open(path))
    classes = {}
    for r in runs:
        for h in r["heals"]:
            c = classes.setdefault(h["class"], {"faults": 0, "back": [], "members": [], "runs": set()})
            c["faults"] += 1
            c["runs"].add(r["seed"])
            for key, field in (("back", "recover_ms"), ("members", "rejoin_ms")):
                if h[field] is not None:
                    c[key].append(h[field])
    failed = {r["seed"] for r in runs if r["violations"]}
    ops = {r["seed"]: r["operations"] for r in runs}
    for name in sorted(classes):
        c = classes[name]
        bad = len(c["runs"] & failed)
        total = sum(ops[s] for s in c["runs"])
        print(f"| {system} | {name} | {c['faults']} | {bad} of {len(c['runs'])} | {total:,} | {ms(c['back'])} | {ms(c['members'])} |")
    for r in runs:
        if r["violations"]:
            print(f"\n- {system} seed {r['seed']}: " + "; ".join(r["violations"]) + f" (replay: `{r['replay']}`)")
d = json.load(open(dart_json))
print("\nDART over processes, its workers partitioned, lossy, paused and suspected while alive "
      "(`--net-faults all`):\n")
print(f"```\n{dart_command}\n```\n")
print(f"{d['runs']} runs, {d['transactions']:,} transactions ({d['committed']:,} committed, {d['aborted']:,} aborted, "
      f"{d['unknown']:,} unknown), {d['asserts_checked']:,} assertions checked, history checked for G0–G2: "
      f"{d['violation_count']} violations.")
for v in d["violations"][:5]:
    print(f"\n- [{v['test']}] seed {v['seed']}: {v['description']} (replay: `{v['replay']}`)")
print("<!-- /part nemesis-slow -->")
