#!/usr/bin/env python3
"""redis-py (from PyPI) against a Tandem store that keeps 64-bit integers
(DDP, Kite, ZAB behind RESP): its own API, Redis's semantics where the store
gives them, and the store's refusals raised as redis-py's errors.

    usage: resp_client_check_int.py PORT SYSTEM [PASSWORD]
      SYSTEM: ddp (a Transactional model, e.g. trans-synch) or kite
Exits 0 and prints the number of checks when every one holds."""
import sys
import threading

import redis

port, system = int(sys.argv[1]), sys.argv[2]
password = sys.argv[3] if len(sys.argv) > 3 else None
r = redis.Redis(port=port, password=password, decode_responses=True, protocol=2)
checks = 0


def check(what, got, want):
    global checks
    if got != want:
        sys.exit(f"FAILED {what}: got {got!r}, want {want!r}")
    checks += 1


def refused(what, call, words):
    global checks
    try:
        call()
    except redis.ResponseError as e:
        if words not in str(e):
            sys.exit(f"FAILED {what}: refused with {e!r}, expected {words!r}")
        checks += 1
        return
    sys.exit(f"FAILED {what}: not refused")


check("ping", r.ping(), True)
check("set", r.set("py:n", 5), True)
check("get", r.get("py:n"), "5")
check("negative", r.set("py:neg", -7) and r.get("py:neg"), "-7")
check("get absent", r.get("py:absent"), None)
refused("a string value", lambda: r.set("py:s", "hello"), "64-bit integers")
refused("a padded integer", lambda: r.set("py:s", "007"), "64-bit integers")
refused("delete", lambda: r.delete("py:n"), "cannot be deleted")
refused("set nx", lambda: r.set("py:n", 1, nx=True), "")
check("incr", r.incr("py:c"), 1)
check("incrby", r.incrby("py:c", 41), 42)
check("decr", r.decr("py:c"), 41)
# Plain pipelining: replies in order.
p = r.pipeline(transaction=False)
for i in range(50):
    p.set(f"py:p{i}", i)
for i in range(50):
    p.get(f"py:p{i}")
got = p.execute()
check("pipeline", got[50:], [str(i) for i in range(50)])

if system == "ddp":
    # MULTI/EXEC through redis-py's transactional pipeline: one DDP transaction.
    p = r.pipeline(transaction=True)
    p.set("py:a", 1).incrby("py:a", 9).mget("py:a", "py:n")
    check("multi/exec", p.execute(), [True, 10, ["10", "5"]])
    check("mset", r.mset({"py:x": 1, "py:y": 2}), True)
    check("mget", r.mget("py:x", "py:y", "py:absent"), ["1", "2", None])
    refused("watch", lambda: r.execute_command("WATCH", "py:a"), "WATCH")
else:
    check("release", r.execute_command("KITE.RELEASE", "py:k", 3), "OK")
    check("acquire", r.execute_command("KITE.ACQUIRE", "py:k"), "3")
    check("cas swapped", r.execute_command("KITE.CAS", "py:k", 3, 4), 1)
    check("cas refused", r.execute_command("KITE.CAS", "py:k", 3, 5), 0)
    refused("multi", lambda: r.pipeline(transaction=True).set("py:k", 1).execute(), "no transactions")
    refused("mget", lambda: r.mget("py:k", "py:n"), "one key at a time")

# Increments from four threads, each with its own connection: none lost.
def worker():
    c = redis.Redis(port=port, password=password, decode_responses=True, protocol=2)
    for _ in range(100):
        c.incr("py:shared")


threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("no increment lost", r.get("py:shared"), "400")
print(f"ok: {checks} checks")
