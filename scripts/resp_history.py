#!/usr/bin/env python3
"""Record a history against Tandem RESP ports with a client library nobody
here wrote (redis-py), for `tandem check`.

    usage: resp_history.py --ports P1,P2 [--password PW] [--clients 6]
                           [--keys 6] [--seconds 8] [--mode multi|register]
                           --out HISTORY.jsonl

--mode multi (for `tandem check`, strict serializability): each client runs,
on one connection at a time, MULTI/EXEC transactions that read two keys and
write both (a unique value each), or read three. A reply tells the outcome:
EXEC's array committed; -INDOUBT, no reply, or a dropped connection unknown
(then the client reconnects to the next port); -TRYAGAIN, -CLUSTERDOWN and
-OOM say nothing was written (aborted). A last transaction reads every key.

--mode register (for `tandem check --model linearizable`): single GETs and
SETs of unique integers, one operation per line, keys numbered.

Prints a JSON summary on stdout."""
import argparse
import json
import random
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

ap = argparse.ArgumentParser()
ap.add_argument("--ports", required=True)
ap.add_argument("--password")
ap.add_argument("--clients", type=int, default=6)
ap.add_argument("--keys", type=int, default=6)
ap.add_argument("--seconds", type=float, default=8.0)
ap.add_argument("--out", required=True)
ap.add_argument("--mode", choices=["multi", "register"], default="multi")
args = ap.parse_args()
ports = [int(p) for p in args.ports.split(",")]
keys = [f"h:{i}" for i in range(args.keys)]
start = time.monotonic_ns()
deadline = start + int(args.seconds * 1e9)
lock = threading.Lock()
history, tally = [], {"committed": 0, "aborted": 0, "unknown": 0, "errors": {}, "commits_by_port_last_second": {}}
NOTHING_WRITTEN = ("TRYAGAIN", "CLUSTERDOWN", "OOM")


def connect(port):
    # No retries inside redis-py: it would send a MULTI/EXEC whose reply was
    # lost again, and the history would show one transaction run twice as one.
    return redis.Redis(port=port, password=args.password, decode_responses=True, protocol=2,
                       socket_timeout=2.0, socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 0))


def outcome_of(err):
    # redis-py turns -CLUSTERDOWN and -TRYAGAIN into classes of their own,
    # without the code in the message.
    named = {"ClusterDownError": "CLUSTERDOWN", "TryAgainError": "TRYAGAIN"}
    kind = type(err).__name__
    code = named.get(kind) or (str(err).split(" ")[0] if kind == "ResponseError" else kind)
    with lock:
        tally["errors"][code] = tally["errors"].get(code, 0) + 1
    return "aborted" if code in NOTHING_WRITTEN else "unknown"


def one(r, port, rng, client, seq):
    """One transaction: its record, and whether the connection is still good."""
    writes = rng.random() < 0.75
    ks = rng.sample(keys, 2 if writes else 3)
    ws = [(k, f"{client}.{seq}.{i}") for i, k in enumerate(ks)] if writes else []
    rec = {"client": client, "port": port, "invoke_ns": time.monotonic_ns() - start, "writes": ws, "reads": []}
    try:
        p = r.pipeline(transaction=True)
        for k in ks:
            p.get(k)
        for k, v in ws:
            p.set(k, v)
        got = p.execute()
        rec["complete_ns"] = time.monotonic_ns() - start
        rec["outcome"] = "committed"
        rec["reads"] = [[k, got[i]] for i, k in enumerate(ks)]
        return rec, True
    except redis.RedisError as e:
        rec["outcome"] = outcome_of(e)
        if rec["outcome"] == "aborted":
            rec["complete_ns"] = time.monotonic_ns() - start
        return rec, isinstance(e, redis.ResponseError)


def register_op(r, port, rng, client, seq):
    """One GET or SET of a unique integer: its record, and whether the connection is still good."""
    k = rng.randrange(args.keys)
    rec = {"session": client, "node": ports.index(port), "key": k, "invoke_ns": time.monotonic_ns() - start}
    write = rng.random() < 0.5
    rec.update({"op": "write", "value": client * 10**9 + seq} if write else {"op": "read", "value": None})
    try:
        got = r.set(keys[k], rec["value"]) if write else r.get(keys[k])
        rec["complete_ns"] = time.monotonic_ns() - start
        rec["ok"] = True
        if not write:
            rec["value"] = None if got is None else int(got)
        rec["outcome"] = "committed"
        return rec, True
    except redis.RedisError as e:
        outcome = outcome_of(e)
        rec["outcome"] = outcome
        rec["ok"] = False
        if outcome == "aborted" or not write:
            # Nothing was written, or a read that returned nothing: no effect.
            rec["complete_ns"] = time.monotonic_ns() - start
        return rec, isinstance(e, redis.ResponseError)


def client_loop(client):
    rng = random.Random(client)
    at = client % len(ports)
    r, seq = connect(ports[at]), 0
    step = register_op if args.mode == "register" else one
    while time.monotonic_ns() < deadline:
        rec, good = step(r, ports[at], rng, client, seq)
        seq += 1
        with lock:
            history.append(rec)
            tally[rec["outcome"]] += 1
            if rec["outcome"] == "committed" and deadline - time.monotonic_ns() < 1e9:
                byp = tally["commits_by_port_last_second"]
                byp[ports[at]] = byp.get(ports[at], 0) + 1
        if not good or rec["outcome"] == "aborted":
            # Another node may serve: move on, after a short pause.
            r.close()
            at = (at + 1) % len(ports)
            r = connect(ports[at])
            time.sleep(0.02)


def final_read():
    for _ in range(50):
        for port in ports:
            try:
                p = connect(port).pipeline(transaction=True)
                for k in keys:
                    p.get(k)
                t0 = time.monotonic_ns() - start
                got = p.execute()
                return {"client": 10**6, "invoke_ns": t0, "complete_ns": time.monotonic_ns() - start,
                        "outcome": "committed", "writes": [], "reads": [[k, got[i]] for i, k in enumerate(keys)]}
            except redis.RedisError:
                time.sleep(0.1)
    raise SystemExit("no port answered the final read")


threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(args.clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if args.mode == "multi":
    history.append(final_read())
with open(args.out, "w") as f:
    for rec in history:
        if args.mode == "register":
            rec.pop("outcome", None)
            rec.setdefault("complete_ns", None)
        f.write(json.dumps(rec) + "\n")
print(json.dumps(tally))
