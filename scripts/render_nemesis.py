#!/usr/bin/env python3
"""Render the `nemesis-ddp` part of docs/RESULTS.md from the JSON of
`tandem nemesis --system ddp --json FILE`: per fault class, the faults
injected, the schedules they were in, the operations of those schedules,
violations, and the time from the heal until throughput and membership were
back (median and max)."""
import json
import statistics
import sys

runs = json.load(open(sys.argv[1]))
command = sys.argv[2] if len(sys.argv) > 2 else "tandem nemesis --system ddp"

classes = {}
for r in runs:
    seen = set()
    for h in r["heals"]:
        c = classes.setdefault(h["class"], {"faults": 0, "schedules": 0, "ops": 0, "back": [], "members": [], "violations": 0})
        c["faults"] += 1
        for key, field in (("back", "recover_ms"), ("members", "rejoin_ms")):
            if h[field] is not None:
                c[key].append(h[field])
        if h["class"] not in seen:
            seen.add(h["class"])
            c["schedules"] += 1
            c["ops"] += r["operations"]
            c["violations"] += sum(1 for v in r["violations"] if h["fault"] in v or not v.startswith("after `"))

def ms(xs):
    if not xs:
        return "–"
    return f"{statistics.median(xs):.0f} / {max(xs):.0f}"

total_ops = sum(r["operations"] for r in runs)
bad = [r for r in runs if r["violations"]]
print("<!-- part nemesis-ddp -->")
print("### Real faults on processes\n")
print(f"{len(runs)} seeded schedules of real faults (docs/NEMESIS.md) on five `tandem node` processes and their "
      f"manager, ⟨Lin, Synch⟩, each fault held 1.5 s and healed before the next; {total_ops:,} operations checked for "
      f"linearizability; schedules with a violation: {len(bad)}.\n")
print(f"```\n{command}\n```\n")
print("| fault class | faults | schedules | operations in them | violations | back after the heal, ms (median / max) | all members again, ms (median / max) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in sorted(classes):
    c = classes[name]
    print(f"| {name} | {c['faults']} | {c['schedules']} | {c['ops']:,} | {c['violations']} | {ms(c['back'])} | {ms(c['members'])} |")
print("\nThroughput is sampled in 100 ms windows, so 100 ms is the shortest time the table can show; the bound "
      "is 1,400 ms (two leases and a second). A schedule's violations count against every class it held.")
for r in bad:
    print(f"\n- seed {r['seed']}: " + "; ".join(r["violations"]) + f" (replay: `{r['replay']}`)")
print("<!-- /part nemesis-ddp -->")
