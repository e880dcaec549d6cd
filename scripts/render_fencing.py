#!/usr/bin/env python3
"""Render two parts of docs/RESULTS.md from the JSON scripts/results.sh
writes under $1: `fencing` (false suspicion is safe: `tandem pandora soak` and
`tandem pandora sim-suspicion`) and `dart-default` (DART's default campaign against
FORD's six bugs), each between part markers."""
import json, os, sys

out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None

soak = load("soak.json")
sim = load("sim-suspicion.json")
bug = load("sim-suspicion-revocable.json")
print("<!-- part fencing -->")
print("### False suspicion is safe: permanent fencing, new incarnations\n")
print("A suspected node is fenced for good on every memory node (a revoked incarnation can never register")
print("again), stops, and comes back as a new incarnation (new node id, coordinator ids and keys).\n")
if soak:
    print("**Soak** (`tandem pandora soak --runs %d --json soak.json`): the demo scenario (SmallBank, 2 compute nodes x 16"
          " coordinators, 2 s) with a random crash of node 2 (70 %% of runs), 1-3 heartbeat stalls of live nodes"
          " (2-6 timeouts; 10 ms timeout) and a competing spinning thread (50 %% of runs).\n" % soak["runs"])
    print("| runs | failed runs | commits acknowledged by fenced incarnations | nodes suspected while alive | new incarnations |")
    print("|---|---|---|---|---|")
    inc = sum(d["incarnations_started"] for d in soak["details"])
    print("| %d | %d | %d | %d | %d |\n" % (soak["runs"], soak["failed_runs"], soak["fenced_acks"], soak["false_positives"], inc))
if sim:
    print("**Seeded simulation** (`tandem pandora sim-suspicion --seeds %d`): slow-not-silent nodes, verdicts between join and"
          " registration, registrations crossing per-memory-node revocations, crashes; %d incarnations declared"
          " failed, %d rejoins, %d commits, **%d seeds with violations**, %d fenced acks." %
          (sim["seeds"], sim["suspected"], sim["rejoins"], sim["committed"], sim["violation_count"], sim["fenced_acks"]))
if bug:
    print(" The same seeds with revocable fencing re-injected (`--inject-bug revocable-fencing`: a revoked"
          " incarnation may register again): **%d of %d seeds"
          " caught** (lost money and commits by fenced incarnations)." % (bug["violation_count"], bug["seeds"]))
print("<!-- /part fencing -->")

rows = []
for name in sorted(os.listdir(out)):
    if name.startswith("dart-default-") and name.endswith(".json"):
        d = json.load(open(os.path.join(out, name)))
        seeds = [v["seed"] for v in d["violations"]]
        rows.append((d["store"], " + ".join(d["injected_bugs"]), min(seeds) if seeds else None, d["runs"]))
print("\n<!-- part dart-default -->")
if rows:
    print("### DART's default campaign against FORD's six bugs\n")
    print("Each row is `tandem dart --store S --inject-bug B --seeds 300 --stop-at-first`: no `--tests`,"
          " the default crash rate, weighted crash points, the replica check and slow recovery.\n")
    print("| store | injected bug | first seed caught | runs executed before stopping |")
    print("|---|---|---|---|")
    for store, bug, seed, runs in rows:
        print("| %s | %s | %s | %d |" % (store, bug, "**not caught**" if seed is None else seed, runs))
print("<!-- /part dart-default -->")
