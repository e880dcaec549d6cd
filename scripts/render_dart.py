#!/usr/bin/env python3
"""Render DART's results from the JSON files `tandem dart --json` wrote
under $1, as the `dart` part of docs/RESULTS.md (stdout, between part
markers; scripts/assemble_results.py places it)."""
import json, os, sys

out = sys.argv[1]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)

long = load("dart-long.json")
print("<!-- part dart -->")
print("### Correct pandora under crash injection, a million litmus transactions\n")
print("`tandem dart --store pandora --seeds 2500 --crash-rate 0.5 --jobs 2 --json target/results/dart-long.json`\n")
print(f"{long['runs']} runs, **{long['transactions']:,} litmus transactions** ({long['committed']:,} committed, "
      f"{long['aborted']:,} aborted, {long['unknown']:,} with unknown outcome), {long['asserts_checked']:,} assertion "
      f"transactions, {long['crashes']} compute crashes: **{long['violation_count']} violations**. "
      f"Checked at **{long['transactions_per_s']:,.0f} transactions/s** on this machine "
      f"(goal ≥ 100 000/s: {'met' if long['transactions_per_s'] >= 100000 else 'not met'}; "
      "the simulator's event queue dominates the profile).\n")
for mode in ["ford", "traditional"]:
    r = load(f"dart-{mode}.json")
    print(f"- {mode}: `tandem dart --store {mode} --seeds 300 --crash-rate 0.5`: {r['transactions']:,} transactions, "
          f"{r['crashes']} crashes, {r['violation_count']} violations.")
p = load("dart-procs.json")
print(f"- over real processes (`tandem dart --store pandora --fabric tcp --crash-rate 1 --seeds 30 --compute-nodes 3 --clients 4 --txs 60`: "
      f"memory-server, membership and litmus-worker processes, one worker `kill -9`ed per run, histories journaled to files): "
      f"{p['transactions']:,} transactions ({p['unknown']} with unknown outcome), {p['crashes']} kills, each recovered by the membership process, "
      f"{p['violation_count']} violations.")
m = load("dart-procs-memkill.json")
print(f"- over real processes with memory-server kills (`tandem dart --store pandora --fabric tcp --crash-rate 1 --memory-kill-rate 1 --seeds 30 --compute-nodes 3 --clients 4 --txs 60`): "
      f"every run also `kill -9`s a memory server mid-run; the workers hold, drain and switch primaries, the killed worker is recovered from the live replicas, "
      f"a replacement is filled and admitted before the final check: {m['transactions']:,} transactions ({m['unknown']} with unknown outcome), "
      f"{m['runs']} memory-server kills, {m['crashes']} worker kills, {m['violation_count']} violations.")
print("\n### FORD's six bugs: which litmus test catches each (next to the paper's Table 1)\n")
print("Each row is `tandem dart --store STORE --inject-bug BUG --tests T --instances I --seeds BUDGET --stop-at-first` "
      "(crashes in every run where the bug needs one); seeds are fixed, so the first catching seed is deterministic. "
      "`crates/dart/tests/mutants.rs` asserts the same budgets.\n")
print("| bug (paper Table 1) | store | crashes | caught by | first seed | budget | paper's litmus test |")
print("|---|---|---|---|---:|---:|---|")
rows = [
    ("complicit abort (C1)", "complicit-abort", "pandora", "no", 80, "litmus 1"),
    ("complicit abort (C1)", "complicit-abort", "ford", "no", 80, "litmus 1"),
    ("covert locks (C1)", "covert-locks", "ford", "no", 10, "litmus 2"),
    ("relaxed locks (C1)", "relaxed-locks", "ford", "no", 40, "litmus 2"),
    ("missing actions: inserts not undo-logged (C2)", "missing-insert-undo", "ford", "yes", 60, "litmus 1 (insert/delete)"),
    ("lost decision (C2)", "lost-decision", "traditional", "yes", 20, "litmus 3"),
    ("logging without locking (C2, with FORD's trusting recovery)", "logging-without-locking", "traditional", "yes", 100, "litmus 3"),
]
for label, bug, store, crash, budget, paper in rows:
    r = load(f"dart-bug-{bug}-{store}.json")
    v = r["violations"][0] if r["violations"] else None
    caught = v["test"] if v else "NOT CAUGHT"
    seed = v["seed"] if v else "–"
    print(f"| {label} | {store} | {crash} | {caught} | {seed} | {budget} | {paper} |")
print("\n### PostgreSQL, the real-world control\n")
print("`tandem dart --store postgres --isolation LEVEL --seeds 20` against Debian's PostgreSQL "
      "(`scripts/postgres.sh`); serialization failures count as aborts.\n")
print("| isolation | transactions | violations | first violation |")
print("|---|---:|---:|---|")
for iso in ["serializable", "repeatable-read", "read-committed"]:
    r = load(f"dart-pg-{iso}.json")
    first = r["violations"][0]["test"] + ": " + r["violations"][0]["description"][:90] if r["violations"] else "–"
    print(f"| {iso} | {r['transactions']:,} | {r['violation_count']} | {first} |")
print("<!-- /part dart -->")
