#!/usr/bin/env python3
"""Render RESULTS's part `cpu` from scripts/results_cpu.sh's JSON.

    render_cpu.py DIR > part.md
"""
import json
import os
import sys

D = sys.argv[1]


def load(name):
    p = os.path.join(D, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def fmt(x, d=0):
    return "–" if x is None else f"{x:,.{d}f}"


def pandora_rows():
    rows = []
    for name, label in [
        ("pandora-sim", "micro, 100 k keys, 2 compute threads, in-process fabric"),
        ("pandora-sim-1k", "micro, 1 k keys (cache-resident), 1 compute thread, in-process fabric"),
        ("pandora-shm", "micro, 100 k keys, shm (memory-server processes, mapped)"),
        ("pandora-tcp", "micro, 100 k keys, tcp (memory-server processes)"),
    ]:
        q, l = load(name + ".json"), load(name + "-loaded.json")
        if not q:
            continue
        s = q["summary"][0]
        loaded = l["summary"][0]["median_protocol_overhead"] if l else None
        rows.append(
            f"| {label} | {fmt(s['median_cpu_ns_per_commit'])} | {fmt(s['median_floor_cpu_ns_per_commit'])} "
            f"| **{fmt(s['median_protocol_overhead'], 2)}** | {fmt(loaded, 2)} | {fmt(s['median_throughput_tps'])} |"
        )
    return rows


def recovery_rows():
    rows = []
    for fabric in ["sim", "shm", "tcp"]:
        q, l = load(f"recovery-{fabric}.json"), load(f"recovery-{fabric}-loaded.json")
        if not q:
            continue
        rows.append(
            f"| {fabric} | {fmt(q['median_wall_us'])} | {fmt(q['median_cpu_us'])} | {fmt(q['cpu_ns_per_coordinator'])} "
            f"| {q['rounds']} | {fmt(q['floor_wall_us'])} | {fmt(q['floor_cpu_us'])} | **{fmt(q['protocol_overhead'], 2)}** "
            f"| {fmt(l['protocol_overhead'], 2) if l else '–'} |"
        )
    return rows


def recovery_bounds():
    """What the processes' CPU says about how fast a recovery can be."""
    out = []
    for fabric in ["tcp", "shm"]:
        q = load(f"recovery-{fabric}.json")
        if not q or "servers_cpu_us" not in q:
            continue
        out.append(
            f"\nOver {fabric}, the memory servers spend {fmt(q['servers_cpu_us'])} µs of CPU per recovery "
            f"({fmt(q['floor_servers_cpu_us'])} per floor). Every process's CPU spread over the host's {q['cores']} cores "
            f"is {fmt(q['cpu_bound_wall_us'])} µs per recovery ({fmt(q['floor_cpu_bound_wall_us'])} per floor), and the "
            f"recovery runs on one thread whose own CPU is {fmt(q['median_cpu_us'])} µs ({fmt(q['floor_cpu_us'])} to post the "
            f"floor's verbs alone): no schedule on this host recovers in less wall time than the larger of the two."
        )
    one, two = load("recovery-tcp-1cpu.json"), load("recovery-tcp.json")
    if one and two and "servers_cpu_us" in one:
        all1 = one["median_cpu_us"] + one["servers_cpu_us"]
        all2 = two["median_cpu_us"] + two["servers_cpu_us"]
        out.append(
            f"\nConfined to one core (`taskset -c 0`), the same recovery over TCP takes {fmt(one['median_wall_us'])} µs wall "
            f"for {fmt(all1)} µs of every process's CPU, its floor {fmt(one['floor_wall_us'])} µs. On two cores every process's CPU "
            f"grows to {fmt(all2)} µs (wakeups that cross cores cost more than the preemptions they avoid), and the wall time "
            f"is {fmt(two['median_wall_us'])} µs, {two['median_wall_us'] / one['median_wall_us']:.2f}× one core's: the second core "
            f"buys {'nothing' if two['median_wall_us'] >= one['median_wall_us'] else 'little'}."
        )
    return out


def size_ratios():
    out = []
    for i in range(1, 6):
        a, b = load(f"recovery-tcp-0.5m-{i}.json"), load(f"recovery-tcp-4m-{i}.json")
        if a and b:
            out.append((b["median_wall_us"] / a["median_wall_us"], b["median_cpu_us"] / a["median_cpu_us"]))
    return out


def runtime_rows():
    rows = []
    ddp, kite = load("ddp-tcp.json"), load("kite-tcp.json")
    loaded = load("ddp-tcp-loaded.json")
    loaded_vs = {m["model"]: m["cpu_per_message_vs_echo"] for m in (loaded or {}).get("models", [])}
    model = (ddp or {}).get("runtime_model") or (kite or {}).get("runtime_model")
    at = lambda s: model["per_message_ns"] + model["per_syscall_ns"] * s
    if ddp:
        # The echo that carries lin-synch's messages for the same load, in the same rounds.
        e = ddp["echo"]
        echo = e["node_cpu_ns_per_message"]
        for m in ddp["models"]:
            c, s = m["node_cpu_ns_per_message"], m["node_syscalls_per_message"]
            lv = loaded_vs.get(m["model"])
            rows.append(f"| DDP {m['model']} | {fmt(c)} | {fmt(s, 2)} | {fmt(c / echo, 2)} (like for like) | {fmt(lv, 2) if lv else '–'} | **{fmt(c / at(s), 2)}** |")
        rows.append(f"| its echo (lin-synch's messages only) | {fmt(echo)} | {fmt(e['node_syscalls_per_message'], 2)} | 1 | – | {fmt(echo / at(e['node_syscalls_per_message']), 2)} |")
    if kite:
        echo = kite["echo"]["cpu_ns_per_message"]
        for n in kite["node_cpu"]:
            c, s = n["node_cpu_ns_per_message"], n["node_syscalls_per_message"]
            name = "Kite" if n["system"] == "kite" else n["system"].upper()
            rows.append(f"| {name} | {fmt(c)} | {fmt(s, 2)} | {fmt(c / echo, 2)} | – | **{fmt(c / at(s), 2)}** |")
    return rows, model, ddp


def before_after():
    """Rows of the alternated before/after pairs, if they were run."""
    def med(v):
        v = sorted(v)
        return v[len(v) // 2] if v else None

    rows = []
    for kind, label, key, unit in [
        ("recovery-sim", "log recovery, 512 coordinators, in process", "median_cpu_us", "CPU µs"),
        ("recovery-tcp", "log recovery, 512 coordinators, over TCP", "median_cpu_us", "CPU µs"),
        ("recovery-tcp", "log recovery, 512 coordinators, over TCP", "median_wall_us", "wall µs"),
        ("pandora-sim", "Pandora micro, in process", None, "CPU ns / commit"),
    ]:
        vals = {"before": [], "after": []}
        for side in vals:
            for i in range(1, 6):
                d = load(f"ba-{kind}-{side}-{i}.json")
                if not d:
                    continue
                v = d["runs"][0]["cpu_ns_per_commit"] if key is None else d[key]
                if v is not None:
                    vals[side].append(v)
        b, a = med(vals["before"]), med(vals["after"])
        if b and a:
            rows.append(f"| {label} | {unit} | {fmt(b)} | {fmt(a)} | **{a / b:.2f}** |")
    return rows


def main():
    print("<!-- part cpu -->")
    print("**Pandora: CPU per committed transaction** (the compute threads' CPU clocks over the measured")
    print("interval; floor: the warm-up's verbs posted again raw on the same fabric, as many threads, lanes")
    print("and groups of batches as the run had; median of the rounds).")
    print()
    print("| run | CPU ns / commit | floor ns / commit | protocol overhead | with a competing load | tx/s (this host) |")
    print("|---|---|---|---|---|---|")
    for r in pandora_rows():
        print(r)
    print()
    print("Commands: `tandem pandora bench --workload micro --fabric sim|shm|tcp --rounds 5 --duration 2`;")
    print("the 1 k row adds `--compute-nodes 1 --keys 1000`.")
    print()
    print("**Log recovery at 512 coordinators** (`tandem pandora recovery-bench --fabric F --runs 50`:")
    print("what a crash leaves, planted, then recovered alone; median of 50. Floor: the same recovery's verbs")
    print("posted raw, a round's batches together.)")
    print()
    print("| fabric | wall µs | CPU µs | CPU ns / coordinator | rounds | floor wall µs | floor CPU µs | overhead (CPU) | with a competing load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in recovery_rows():
        print(r)
    for line in recovery_bounds():
        print(line)
    ratios = size_ratios()
    if ratios:
        walls = ", ".join(f"{w:.2f}" for w, _ in ratios)
        cpus = ", ".join(f"{c:.2f}" for _, c in ratios)
        print()
        print(f"Store size, 4 M against 0.5 M keys over TCP, five alternated pairs of 20 recoveries: wall {walls};")
        print(f"CPU {cpus} (`--keys 4000000` against `--keys 500000`).")
    ba = before_after()
    if ba:
        print()
        what_file = os.path.join(D, "ba-what.txt")
        what = open(what_file).read().strip() if os.path.exists(what_file) else "an older binary against this one"
        print(f"**Before and after:** {what} (alternated, five pairs; medians;")
        print("`CPU_BEFORE_BIN=... CPU_BEFORE_WHAT=... scripts/results_cpu.sh`):")
        print()
        print("| what | unit | before | after | after / before |")
        print("|---|---|---|---|---|")
        for r in ba:
            print(r)
    rows, model, ddp = runtime_rows()
    if rows:
        print()
        print("**The message-passing runtime: CPU per message handled** (peer messages received and client")
        print("requests taken; the node processes' CPU from /proc). Its cost line, fitted over echoes among five")
        print("processes at windows of 5, 20 and 80 messages per link (`tandem net echo --nodes 5 --sweep 5,20,80`):")
        pts = "; ".join(f"window {w}: {s:.3f} syscalls, {c:.0f} ns" for w, s, c in model["points"])
        print(f"**{model['per_message_ns']:.0f} ns per message + {model['per_syscall_ns']:.0f} ns per syscall** ({pts}).")
        print()
        print("DDP's nodes are set beside an echo of the same load: the same sessions, processes and links, in the")
        print("same rounds, against nodes that only carry ⟨Lin, Synch⟩'s messages (INV, ACK, VAL per write) and hold a")
        print("request only where its writer does (a request for a key being written waits for its last ACK), so at")
        print("least as many messages in flight per link. Kite's and ZAB's beside the five-process echo at 20 per link.")
        print()
        print("| node | CPU ns / message | syscalls / message | vs echo | vs echo, with a competing load | vs the runtime at its syscalls |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(r)
        print()
        print("Commands: `tandem ddp bench --net tcp --models lin-synch --seconds 3 --rounds 3`;")
        print("`tandem kite bench --net tcp --systems kite,zab --measure-s 3`.")
    print("<!-- /part cpu -->")


main()
