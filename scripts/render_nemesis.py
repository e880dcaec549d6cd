#!/usr/bin/env python3
"""Render the `nemesis-<system>` part of docs/RESULTS.md from the JSON of
`tandem nemesis --system <system> --json FILE`: per fault class, the faults
injected, the schedules they were in, the operations of those schedules,
violations, and the time from the heal until throughput was back and every
node served again (median and max).

Usage: render_nemesis.py FILE COMMAND SYSTEM (pandora, pandora-zk, ddp, ddp-trans, heal, kite or zab)."""
import json
import statistics
import sys

runs = json.load(open(sys.argv[1]))
command = sys.argv[2]
system = sys.argv[3]
SYSTEMS = {
    "pandora": ("Real faults on Pandora's processes", "three `compute-server`s (micro, 200 keys), three `memory-server`s (two copies of each partition) and the membership",
                "by `check-cluster` after every compute server is killed and recovered (replicas identical, no lock of a live coordinator, counters within the ledgers of acknowledged writes)",
                "2,750 ms (a compute server's 1.5 s patience with a live memory server it cannot reach, the 250 ms heartbeat timeout, and a second)", "every memory server up in the membership's configuration (a failed one replaced) and every compute server committing"),
    "pandora-zk": ("Real faults on Pandora's processes, its failure detector replicated", "three `compute-server`s (micro, 200 keys), three `memory-server`s and three membership replicas keeping their state in ZooKeeper (`--membership zookeeper`; `zk-cut`: ZooKeeper cut from one replica)",
                   "by `check-cluster` after every compute server is killed and recovered",
                   "7,000 ms (the 4 s ZooKeeper session, two memory-probe timeouts and 2 s)", "every memory server up in the leader's configuration and every compute server committing"),
    "ddp": ("Real faults on DDP's processes", "five `tandem node` processes and their manager, ⟨Lin, Synch⟩",
            "for linearizability", "1,400 ms (two leases and a second)", "every node a member of the manager's configuration again"),
    "ddp-trans": ("Real faults on DDP's processes, Transactional consistency", "five `tandem node` processes and their manager, ⟨Trans, Synch⟩ (three requests a transaction; operations are transactions)",
                  "for serializability of the committed transactions, from what their clients saw", "1,400 ms (two leases and a second)", "every node a member of the manager's configuration again"),
    "heal": ("Real faults on HEAL's processes", "five `tandem node --recovery heal` processes and their manager, ⟨Lin, Synch⟩, restarted nodes recovering with HEAL (`recover`: a recovery under another fault)",
             "for linearizability", "1,400 ms (two leases and a second)", "every node a member of the manager's configuration again"),
    "kite": ("Real faults on Kite's processes", "five `tandem node --system kite` processes (crash-stop: at most two killed a schedule, never restarted), write time-out 100 ms",
             "for release consistency", "1,500 ms", "every live node answering a release again"),
    "zab": ("Real faults on the ZAB baseline's processes", "five `tandem node --system zab` processes, node 0 the leader",
            "for sequential consistency in zxid order", "1,500 ms", "every live node answering a write again"),
}
title, procs, check, bound, whole = SYSTEMS[system]

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
print(f"<!-- part nemesis-{system} -->")
print(f"### {title}\n")
print(f"{len(runs)} seeded schedules of real faults (docs/NEMESIS.md) on {procs}, each fault held 1.5 s and healed "
      f"before the next; {total_ops:,} {'committed writes' if system.startswith('pandora') else 'operations'} checked {check}; schedules with a violation: {len(bad)}.\n")
print(f"```\n{command}\n```\n")
print("| fault class | faults | schedules | operations in them | violations | back after the heal, ms (median / max) | all serving again, ms (median / max) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in sorted(classes):
    c = classes[name]
    print(f"| {name} | {c['faults']} | {c['schedules']} | {c['ops']:,} | {c['violations']} | {ms(c['back'])} | {ms(c['members'])} |")
print("\nThroughput is sampled in 100 ms windows, so 100 ms is the shortest time the table can show; "
      f"\"all serving\" is {whole}. The bound is {bound}. A schedule's violations count against every class it held.")
for r in bad:
    print(f"\n- seed {r['seed']}: " + "; ".join(r["violations"]) + f" (replay: `{r['replay']}`)")
print(f"<!-- /part nemesis-{system} -->")
