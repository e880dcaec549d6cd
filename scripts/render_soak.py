#!/usr/bin/env python3
"""Render the `soak` part of docs/RESULTS.md (slot reclamation: table
occupancy and memory over long runs) from the JSON of `tandem pandora table-soak`
(scripts/results.sh), between part markers."""
import json, os, sys

out = sys.argv[1]
secs = os.environ.get("SOAK_SECS", "600")
print("<!-- part soak -->")
print("### Slot reclamation: insert/delete workloads in bounded memory\n")
print("A deleted key's tombstone is reused by later inserts, or emptied once the next slot is empty, in a logged")
print("transaction; an absent key guards its whole probe path (the argument: ARCHITECTURE.md). Each run below is")
print("`tandem pandora table-soak --workload W --duration %s --reclaim both` on the in-process fabric at full speed (2 compute" % secs)
print("nodes x 16 coordinators, Pandora), sampling every table's occupied slots (live keys and tombstones) and the")
print("process's resident memory every 10 s. \"Half-way\" and \"end\" are the samples the stability verdict compares:")
print("a table whose occupancy grew by more than 1 % of its slots over the second half, or memory by more than 5 %,")
print("is reported as still growing. `tpcc-bounded` is TPC-C with a bounded history (`TpccSpec::retain`, 3 000 orders and")
print("payments per district, archived into per-customer and per-district sums; docs/PANDORA.md), since TPC-C itself")
print("grows its order, order-line and history tables and its undelivered backlog by design. Without reclamation")
print("a table that fills stops changing: a flat curve far above its live rows is a full table, whose inserts abort.\n")
for w in ["tatp", "tpcc-bounded"]:
    p = os.path.join(out, "soak-%s.json" % w)
    if not os.path.exists(p):
        continue
    reports = json.load(open(p))
    print("#### %s\n" % w)
    print("| reclamation | commits | tx/s | slots reclaimed | aborts: table full | check | table | slots | first | half-way | end | live at end | RSS half-way → end (MiB) | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        changed = [t for t in r["tables"] if t["first"] != t["end"] or t["end"] != t["live_end"]]
        growing = [t["name"] for t in changed if (t["end"] - t["mid"]) > 0.01 * t["slots"]]
        rss = (r["rss_end"] - r["rss_mid"]) / max(r["rss_mid"], 1)
        full = r.get("table_full_aborts")
        verdict = "stable" if not growing and rss <= 0.05 else "grows: " + ", ".join(growing + (["memory"] if rss > 0.05 else []))
        # Flat far above its live rows: a full table (its inserts abort).
        saturated = [t["name"] for t in changed if t["mid"] == t["end"] and t["end"] > 2 * max(t["live_end"], 1)]
        if full or saturated:
            verdict = "full: " + ", ".join(saturated) if saturated else "tables full"
        check = {True: "passed", False: "FAILED", None: "skipped"}[r["check_passed"]]
        for i, t in enumerate(changed):
            head = ("on" if r["reclaim"] else "off", "%d" % r["committed"], "%.0f" % r["throughput_tps"],
                    "%d" % r["slots_reclaimed"], "%d" % full if full is not None else "not recorded", check) if i == 0 else ("", "", "", "", "", "")
            tail = ("%d → %d" % (r["rss_mid"] >> 20, r["rss_end"] >> 20), verdict) if i == 0 else ("", "")
            print("| %s | %s | %s | %s | %s | %s | %s | %d | %d | %d | %d | %d | %s | %s |" % (head + (t["name"], t["slots"], t["first"], t["mid"], t["end"], t["live_end"]) + tail))
    print("\n![%s occupancy](figures/soak-%s.svg)\n" % (w, w))
print("<!-- /part soak -->")
