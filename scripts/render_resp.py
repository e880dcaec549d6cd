#!/usr/bin/env python3
"""Render the `resp` part of docs/RESULTS.md from scripts/results_resp.sh's CSVs."""
import csv, glob, json, os, sys

out = sys.argv[1]


def rps(path):
    with open(path) as f:
        # A header is "test" (or "P1 test" in DDP's files, whose rows carry the pipeline depth).
        return {row[0]: float(row[1]) for row in csv.reader(f) if row and row[0].split(" ")[-1] != "test"}


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

# DDP beside Redis with two asynchronous replicas.
DURABILITY = {
    "eventual-eventual": "a write is acknowledged by the node that took it and reaches the other two, and"
    " their NVM files, afterwards; Redis acknowledges from the primary's memory and replicates afterwards:"
    " the same durability",
    "lin-synch": "a write is acknowledged once all three nodes hold it in their NVM files (memory-mapped, not"
    " fsynced); Redis still acknowledges from the primary's memory, so this row is stronger on Tandem's side."
    " Redis needs `WAIT 2 0` after each write for the same, a second command redis-benchmark cannot send:"
    " the last table sends it",
}
ddp_rounds = glob.glob(os.path.join(out, "ddp-*-*.csv"))
if ddp_rounds:
    print("\nThree DDP nodes (`tandem node --resp`, a manager, NVM in memory-mapped files) beside Redis with two"
          " asynchronous replicas (`scripts/peers.sh start redis-repl`), all on this machine's loopback;"
          " `redis-benchmark -c 50 -P P -n 100000 -r 100000` with `set key:__rand_int__ 42` and"
          " `get key:__rand_int__` against DDP's node 0 and Redis's primary, alternated, medians. DDP's front"
          " end stores 64-bit integers, hence the integer value.\n")
    print("| DDP model | command | pipeline | DDP ops/s | Redis (2 async replicas) ops/s | DDP / Redis |")
    print("|---|---|---|---|---|---|")
    for model in ("eventual-eventual", "lin-synch"):
        d = [rps(f) for f in sorted(glob.glob(os.path.join(out, f"ddp-{model}-*.csv")))]
        r = [rps(f) for f in sorted(glob.glob(os.path.join(out, f"redisrepl-{model}-*.csv")))]
        if not d or not r:
            continue
        for name in d[0]:
            p, cmd = name.split(" ", 1)
            a, b = median([x.get(name, 0) for x in d]), median([x.get(name, 0) for x in r])
            ratio = a / b if b else float("nan")
            print(f"| {model} | `{cmd}` | {p[1:]} | {a:,.0f} | {b:,.0f} | **{ratio:.2f}** |")
    for model, text in DURABILITY.items():
        print(f"\n- Durability, {model}: {text}.")

def bench(name):
    """resp-bench's rows of `name`, by pipeline depth: requests/s per round."""
    rows = {}
    path = os.path.join(out, f"rb-{name}.jsonl")
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            rows.setdefault(r["pipeline"], []).append(r["requests_per_s"])
    return rows


PAIRS = [
    ("Pandora (`tandem serve`)", "tandem-transfer", "Redis, one server", "redis-transfer",
     "`MULTI`, `INCRBY a -1`, `INCRBY b 1`, `EXEC`"),
    ("DDP ⟨Lin, Synch⟩, 3 nodes", "ddp-lin-synch-set", "Redis + 2 replicas, `WAIT 2 0`", "redis-set-wait",
     "`SET k 42` (Redis: then `WAIT 2 0`)"),
]
if any(bench(a) for _, a, _, _, _ in PAIRS):
    print("\nThe same client where redis-benchmark cannot send the request: `tandem resp-bench` (a closed loop"
          " per connection over the `redis` crate's client, unmodified), `-c 50 -r 100000`, 5 s per run,"
          " alternated, medians. A request is the whole block (one `MULTI`…`EXEC`, or a `SET` with its `WAIT`).\n")
    print("| Tandem | Redis | request | pipeline | Tandem requests/s | Redis requests/s | Tandem / Redis |")
    print("|---|---|---|---|---|---|---|")
    for tname, tfile, rname, rfile, req in PAIRS:
        t, r = bench(tfile), bench(rfile)
        for p in sorted(t):
            a, b = median(t[p]), median(r.get(p, []))
            if b:
                print(f"| {tname} | {rname} | {req} | {p} | {a:,.0f} | {b:,.0f} | **{a / b:.2f}** |")
    print("\n- Durability, MULTI/EXEC: as in the first table (none past the process on either side). Both run the"
          " block atomically: Redis by running it alone on its one thread, Pandora as a strictly serializable"
          " transaction among others.")
    print("- Durability, SET then WAIT: DDP acknowledges once all three nodes hold the write in their NVM files"
          " (memory-mapped, not fsynced); Redis once both replicas answered `WAIT` (their memory): a copy on"
          " every node on both sides, Tandem's in files that outlive its processes.")
print("<!-- /part resp -->")
