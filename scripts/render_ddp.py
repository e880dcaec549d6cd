#!/usr/bin/env python3
"""Render the `ddp` part of docs/RESULTS.md from the JSON of
`tandem ddp bench` (sim, 1 and 20 cores; tcp), `tandem ddp check` and
`tandem net echo` (scripts/results_ddp.sh)."""
import json, os, sys

out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None

def by_model(d):
    return {m["model"]: m for m in d["models"]} if d else {}

a, b = by_model(load("ddp-bench-a.json")), by_model(load("ddp-bench-b.json"))
few, slow = by_model(load("ddp-bench-10clients.json")), by_model(load("ddp-bench-rtt2us.json"))
a20 = by_model(load("ddp-bench-a-20cores.json"))
few20, slow20 = by_model(load("ddp-bench-10clients-20cores.json")), by_model(load("ddp-bench-rtt2us-20cores.json"))
check, echo = load("ddp-check.json"), load("net-echo.json")
recovery = load("ddp-check-recovery.json")
membership = load("ddp-check-membership.json")
copy_source = load("ddp-check-copy-source.json")
tcp_doc = load("ddp-tcp-a.json")
tcp = by_model(tcp_doc)
print("<!-- part ddp -->")
print("### The 25 models in simulated time\n")
print("Simulated time with the paper's parameters (5 nodes, every key on all 5, 20 closed-loop clients per node,")
print("1 µs round trip, 400 ns persists, 200 ns CPU per input on one core per node as docs/DESIGN.md §7.1 models it;")
print("YCSB, 1000 records, Zipfian), every model")
print("normalized to lin-synch **from the same run** (`tandem ddp bench --models all --workload ycsb-a`).")
print("Transactional models run transactions of 5 requests (the paper's size). Network/persist latency ratio: 1000/400 = 2.5.\n")
if a:
    print("| model | YCSB-A vs lin-synch | YCSB-B vs lin-synch | read µs (A) | write µs (A) | messages per op (A) |")
    print("|---|---|---|---|---|---|")
    for name, m in a.items():
        bn = b.get(name, {}).get("normalized")
        print("| %s | %.2f | %s | %.1f | %.1f | %.2f |" % (name, m["normalized"], "%.2f" % bn if bn else "-", m["read_latency_us"], m["write_latency_us"], m["messages_per_op"]))
    print()
    def orderings(a, few, slow):
        def r(d, m):
            return d.get(m, {}).get("normalized")
        rows = []
        ee = r(a, "eventual-eventual")
        if ee: rows.append(("⟨Eventual, Eventual⟩ / ⟨Lin, Synch⟩ (YCSB-A)", "3.3", "%.2f" % ee))
        cz = [r(a, m) for m in a if m.startswith("causal-") or m.startswith("eventual-")]
        lz = [r(a, m) for m in a if m.startswith("lin-")]
        if cz and lz:
            rows.append(("Causal and Eventual vs Lin (mean of models)", "2-3x", "%.2fx" % ((sum(cz) / len(cz)) / (sum(lz) / len(lz)))))
        def ratio(d, m):
            return d[m]["throughput_ops"] / a[m]["throughput_ops"] if d.get(m) and a.get(m) else None
        for (d, what, paper) in ((few, "at 10 clients / at 100 (ops/s)", {"lin-synch": "2.2"}), (slow, "at 2 µs / at 1 µs round trip", {"lin-synch": "0.88"})):
            for m in ("lin-synch", "causal-synch", "causal-eventual"):
                if ratio(d, m) is not None:
                    rows.append(("%s %s" % (m, what), paper.get(m, "≈1 (flat)"), "%.2f" % ratio(d, m)))
        spread = {}
        for name, m in a.items():
            spread.setdefault(name.split("-")[0], []).append(m["normalized"])
        if len(a) > 5:
            worst = max(max(v) / max(min(v), 1e-9) for v in spread.values())
            rows.append(("persistency spread within one consistency (max/min)", "≤ ~2x", "%.2fx" % worst))
            agg = {}
            for name, m in a.items():
                agg.setdefault(name.split("-", 1)[1], []).append(m["normalized"])
            order = sorted(agg, key=lambda p: sum(agg[p]) / len(agg[p]))
            rows.append(("persistency models, slowest to fastest (mean over consistency)", "strict first, eventual last", ", ".join(order)))
            rep = [(r(a, c + "-re"), r(a, c + "-synch")) for c in ("lin", "re", "trans", "causal", "eventual")]
            rows.append(("RE-p ≤ ~Synch (consistency models where it holds)", "most", "%d of %d" % (sum(1 for x, y in rep if x is not None and y and x <= 1.05 * y), len(rep))))
        if a.get("lin-re") and a.get("lin-synch"):
            rows.append(("lin-re read latency / lin-synch read latency", "> 1", "%.2f" % (a["lin-re"]["read_latency_us"] / max(a["lin-synch"]["read_latency_us"], 1e-9))))
        return rows
    one = orderings(a, few, slow)
    many = dict((k, v) for k, _, v in orderings(a20, few20, slow20)) if a20 else {}
    if one:
        print("With one core per node, throughput is bound by the modelled CPU, so the 5x5 ratios track the inputs each")
        print("operation costs, and the sensitivity to clients and round trip is flat. With the paper's 20 cores per")
        print("server (Table 5; `--cores 20`) the CPU no longer bounds it: the round-trip effect appears (in the")
        print("paper's direction, larger) but the 5x5 ratios widen far past the paper's; neither reproduces the client")
        print("sweep (docs/DDP.md, \"Hardware model\").\n")
        print("| the paper's claim (DDP §8.1–8.2) | paper | 1 core per node | 20 cores per node |")
        print("|---|---|---|---|")
        for (k, p, v) in one:
            print("| %s | %s | %s | %s |" % (k, p, v, many.get(k, "-")))
        print()
    sims = [m["sim_messages_per_s"] for m in a.values()]
    runs = sorted(by_model(load("ddp-simspeed-%d.json" % i))["lin-synch"]["sim_messages_per_s"]
                  for i in range(1, 6) if os.path.exists(os.path.join(out, "ddp-simspeed-%d.json" % i)))
    ls = runs[len(runs) // 2] if runs else 0
    spread = " (runs: %s M)" % ", ".join("%.2f" % (r / 1e6) for r in runs) if runs else ""
    print("Simulator speed: %.2f M protocol messages per wall-clock second on one core for lin-synch, the median of %d runs%s"
          " (target 2 M; `tandem ddp bench --models lin-synch --measure-ns 50000000`, long enough to time);"
          " %.2f-%.2f M over all models in the 10 ms runs above (the batched UPD models send few messages per operation"
          " but still cost a step per update, persist and buffered update)." % (ls / 1e6, len(runs), spread, min(sims) / 1e6, max(sims) / 1e6))
    print()
if tcp:
    echo = tcp_doc["echo"]
    print("### Over real processes\n")
    print("**The same models over real processes** (`tandem ddp bench --net tcp --models all --workload ycsb-a`): five")
    print("`tandem node` processes on loopback, NVM in memory-mapped files, %d pipelined sessions per node, %.0f s per model"
          " after a 1 s warm-up, %d core(s) shared by every process and the load; counted by the nodes themselves."
          " The ceiling is measured like for like in the same rounds: the same sessions against five nodes that carry"
          " ⟨Lin, Synch⟩'s messages (INV to every other node, ACK back, VAL out) and make requests wait only where"
          " ⟨Lin, Synch⟩'s writer does (a request for a key the node is writing waits for its last ACK; any other read is"
          " answered at once), so they keep no fewer messages in flight per link than the model; nothing else"
          " (`tandem node --system ddp-echo`): %.0f ops/s, %.2f M peer messages/s, %.1f µs of node CPU per op,"
          " %.0f ns and %.2f syscalls per message.\n"
          % (tcp_doc["clients_per_node"], tcp_doc["seconds"], tcp_doc["cores"], echo["throughput_ops"],
             echo["messages_per_s"] / 1e6, echo["node_cpu_us_per_op"], echo["node_cpu_ns_per_message"],
             echo["node_syscalls_per_message"]))
    print("| model | ops/s | vs lin-synch (processes) | vs lin-synch (simulated) | messages per op | of the echo's ops/s | node CPU µs per op | CPU per message vs the echo's | syscalls per message |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in tcp.items():
        sim = a.get(name, {}).get("normalized")
        print("| %s | %.0f | %.2f | %s | %.2f | %.1f %% | %.1f | %.2f | %.2f |" % (name, m["throughput_ops"], m["normalized"] or 0, "%.2f" % sim if sim else "-",
              m["messages_per_op"], 100 * m["of_echo_ops"], m["node_cpu_us_per_op"], m["cpu_per_message_vs_echo"],
              m["node_syscalls_per_message"]))
    ls = tcp.get("lin-synch")
    print("\nOn processes the cost of an operation is CPU in the kernel and the protocol step, not the modelled")
    print("latencies, so the ordering follows messages and persists per operation.")
    # The target is judged on the run that alternates lin-synch and the echo
    # over three rounds (the CPU section's), not on this one, where the echo
    # runs once after every model and the host may have drifted meanwhile.
    alt = load(os.path.join("cpu", "ddp-tcp.json"))
    alt_ls = next((m for m in (alt or {}).get("models", []) if m["model"] == "lin-synch"), None)
    if ls and alt_ls:
        e2 = alt["echo"]
        met = "met" if alt_ls["of_echo_ops"] >= 0.5 else "not met"
        print("Here the echo ran once, after all 25 models. In three rounds that alternate ⟨Lin, Synch⟩ and the echo"
              " (`tandem ddp bench --net tcp --models lin-synch --seconds 3 --rounds 3`, the CPU section's run),"
              " ⟨Lin, Synch⟩ runs at **%.1f %%** of the echo's operations (target ≥ 50 %%: %s). Both saturate the two"
              " cores, so that is about the inverse of node CPU per operation: %.1f µs against %.1f. The gap is mostly"
              " system calls: the echo's writes to a peer carry %.1f messages and its nodes spend %.2f syscalls per"
              " message, ⟨Lin, Synch⟩'s %.1f and %.2f. ⟨Lin, Synch⟩ keeps fewer messages in flight because it also"
              " holds a request at the other members from a key's INV to its VAL, which the echo does not.\n"
              % (100 * alt_ls["of_echo_ops"], met, alt_ls["node_cpu_us_per_op"], e2["node_cpu_us_per_op"],
                 e2["messages_per_write"], e2["node_syscalls_per_message"], alt_ls["messages_per_write"],
                 alt_ls["node_syscalls_per_message"]))
    print()
if check or recovery or membership or copy_source:
    print("### Checks under faults\n")
if check:
    print("**Checks** (`tandem ddp check --seeds %d`, no crash, one node crashed and rejoined, whole cluster"
          " crashed; drops, duplicates and delays):\n" % (check["models"][0]["runs"] // 3))
    print("| model | runs | operations | violations | acknowledged writes lost | read versions vanished |")
    print("|---|---|---|---|---|---|")
    for m in check["models"]:
        print("| %s | %d | %d | %d | %d | %d |" % (m["model"], m["runs"], m["completed"], m["violation_count"], m["lost_acked_writes"], m["vanished_reads"]))
    print("\nLosses are counted after whole-cluster crashes, where a model allows them; the checks assert what each")
    print("model promises (docs/DDP.md).\n")
if recovery:
    print("**Crashes during recovery** (`tandem ddp check --seeds %d --crash recovery`: one node crashes and rejoins;"
          " another member crashes while it catches up (buddy), or it crashes again (again), or a second node crashes"
          " while the first is away (two), or a copy's only source crashes after serving it (copy-source, below);"
          " full-copy catch-up; every run also ends by checking that every node settles):\n"
          % (recovery["models"][0]["runs"] // 5))
    print("| model | runs | operations | violations |")
    print("|---|---|---|---|")
    for m in recovery["models"]:
        print("| %s | %d | %d | %d |" % (m["model"], m["runs"], m["completed"], m["violation_count"]))
    print()
if membership:
    print("**Membership faults** (`tandem ddp check --seeds %d --crash membership`): a slow node (links 20 µs slower)"
          " suspected and removed while alive, then added back (suspect); the same node cut off instead (isolated);"
          " suspect again with each node hearing the manager's announcements up to 5 µs apart (suspect-spread);"
          " a node killed and restarted within its lease, which the manager removes and adds back by its new boot id,"
          " announcements staggered too (bounce). Full-copy catch-up. Every run ends by checking that every node"
          " settles:\n" % (membership["models"][0]["runs"] // 4))
    print("| model | runs | operations | violations |")
    print("|---|---|---|---|")
    for m in membership["models"]:
        print("| %s | %d | %d | %d |" % (m["model"], m["runs"], m["completed"], m["violation_count"]))
    print()
if copy_source:
    bad = [m["model"] for m in copy_source["models"] if m["violation_count"]]
    print("**A copy's source crashing** (`tandem ddp check --seeds %d --crash copy-source`): one node is away; an"
          " origin's links to every member but one (the source) are cut, so its updates reach only the source, and"
          " the origin crashes; the away node restarts and copies from the members; the source crashes once that"
          " node serves; both rejoin. Drops, duplicates and delays too. A copy carries its sender's log, so the"
          " copier sends the source's updates on. Under Causal, what only the two crashed nodes held is lost, and"
          " members give up on the updates and sessions that need it: those sessions are answered PastLost and go"
          " on (docs/DDP.md, \"Orphaned updates\"). %s\n"
          % (copy_source["models"][0]["runs"],
             "Every model: 0 violations." if not bad else
             "Violations under %s." % ", ".join(bad)))
    print("| model | runs | operations | violations | answered PastLost |")
    print("|---|---|---|---|---|")
    for m in copy_source["models"]:
        print("| %s | %d | %d | %d | %d |" % (m["model"], m["runs"], m["completed"], m["violation_count"],
                                            m.get("pasts_lost", 0)))
    print()
if echo and not tcp:
    print("**Runtime ceiling** (`tandem net echo`): %.2f M messages/s between two processes (%d in flight)."
          " DDP over five processes does not come close.\n" % (echo["messages_per_s"] / 1e6, echo["window"]))
print("<!-- /part ddp -->")
