#!/usr/bin/env python3
"""A client library nobody here wrote (redis-py, from PyPI) against a Tandem
RESP port: its own API, Redis's semantics expected.

    usage: resp_client_check.py PORT [PASSWORD]
Exits 0 and prints the number of checks when every one holds."""
import sys
import threading

import redis

port = int(sys.argv[1])
password = sys.argv[2] if len(sys.argv) > 2 else None
r = redis.Redis(port=port, password=password, decode_responses=True, protocol=2)
other = redis.Redis(port=port, password=password, decode_responses=True, protocol=2)
checks = 0


def check(what, got, want):
    global checks
    if got != want:
        sys.exit(f"FAILED {what}: got {got!r}, want {want!r}")
    checks += 1


check("ping", r.ping(), True)
check("set", r.set("py:k", "v"), True)
check("get", r.get("py:k"), "v")
check("get absent", r.get("py:absent"), None)
check("set nx on present", r.set("py:k", "w", nx=True), None)
check("set xx on absent", r.set("py:absent", "w", xx=True), None)
check("set get", r.set("py:k", "w", get=True), "v")
check("mset", r.mset({"py:a": "1", "py:b": "2"}), True)
check("mget", r.mget(["py:a", "py:b", "py:absent"]), ["1", "2", None])
check("incr", r.incr("py:a"), 2)
check("incrby", r.incrby("py:a", 40), 42)
check("decr", r.decr("py:a"), 41)
check("delete", r.delete("py:a", "py:absent"), 1)
check("exists", r.exists("py:a", "py:b"), 1)
try:
    r.incr("py:k")
    sys.exit("FAILED incr of a string: no error")
except redis.ResponseError as e:
    check("incr of a string", "not an integer" in str(e), True)
try:
    r.set("py:t", "1", ex=10)
    sys.exit("FAILED set ex: no error")
except redis.ResponseError as e:
    check("set ex refused", "expire" in str(e), True)

# MULTI/EXEC through the library's transactional pipeline.
p = r.pipeline(transaction=True)
p.set("py:m", "5").incr("py:m").get("py:m")
check("pipeline transaction", p.execute(), [True, 6, "6"])

# WATCH: another client's write between WATCH and EXEC aborts it.
with r.pipeline() as p:
    p.watch("py:m")
    other.set("py:m", "6")  # the same value: still a write
    p.multi()
    p.incr("py:m")
    try:
        p.execute()
        sys.exit("FAILED watch: EXEC ran after another client's write")
    except redis.WatchError:
        check("watch error", True, True)
check("watched key untouched", r.get("py:m"), "6")

# The library's optimistic-locking helper, from threads: no increment lost.
r.set("py:counter", "0")


def add_one(p):
    v = p.get("py:counter")
    p.multi()
    p.set("py:counter", int(v or 0) + 1)


def bump(n):
    c = redis.Redis(port=port, password=password, protocol=2)
    for _ in range(n):
        c.transaction(add_one, "py:counter")


threads = [threading.Thread(target=bump, args=(50,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("watch-retry counter from 4 threads", r.get("py:counter"), "200")

# Plain pipelining (no transaction): answers in order.
p = r.pipeline(transaction=False)
for i in range(100):
    p.set(f"py:p{i}", i)
for i in range(100):
    p.get(f"py:p{i}")
out = p.execute()
check("pipeline answers in order", out[100:], [str(i) for i in range(100)])

print(f"ok: {checks} checks")
