#!/usr/bin/env python3
"""Render the `resp` part of docs/RESULTS.md from scripts/results_resp.sh's CSVs."""
import csv, glob, os, sys

out = sys.argv[1]


def rps(path):
    with open(path) as f:
        return {row[0]: float(row[1]) for row in csv.reader(f) if row and row[0] != "test"}


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


print("<!-- part resp -->")
print("`redis-benchmark -c 50 -P P -n 200000 -r 100000 -d 16 -t set,get,incr,mset` against each, alternated,")
print("%d rounds, medians (`scripts/results_resp.sh`). Durability is the same on both sides: none past the"
      " process. Redis keeps one copy in its process (no AOF, no RDB, no replica); `tandem serve` two copies on"
      " memory nodes inside its process, and runs each command as a strictly serializable transaction.\n"
      % len(glob.glob(os.path.join(out, "tandem-P1-*.csv"))))
print("| command | pipeline | Tandem (Pandora) ops/s | Redis ops/s | Tandem / Redis |")
print("|---|---|---|---|---|")
for p in (1, 16):
    t = [rps(f) for f in sorted(glob.glob(os.path.join(out, f"tandem-P{p}-*.csv")))]
    r = [rps(f) for f in sorted(glob.glob(os.path.join(out, f"redis-P{p}-*.csv")))]
    if not t or not r:
        continue
    for name in t[0]:
        a, b = median([x.get(name, 0) for x in t]), median([x.get(name, 0) for x in r])
        ratio = a / b if b else float("nan")
        print(f"| {name} | {p} | {a:,.0f} | {b:,.0f} | **{ratio:.2f}** |")
print("<!-- /part resp -->")
