#!/usr/bin/env python3
"""Render the `fuzz` part of docs/RESULTS.md from a TANDEM_FUZZ_REPORT file
(one line per target: name, executions, seconds, crashes), between part
markers."""
import sys

# What each target found while it was written (each fixed, with a regression
# test holding its minimal input). Keyed by the start of the target's name.
FOUND = {
    "net manager stream": "1 (memory): `Frames::next` allocated a frame's claimed length (up to 64 MiB) before any byte of it; the fix grows it as bytes arrive",
    "ddp peer messages": "1: a node of the INV family panicked on the UPD family's messages; it drops them",
    "kite peer messages": "1: a replica panicked on a `Propose` for slot 0 of a key with nothing committed; it refuses it",
    "membership restore": "2: a stored incarnation count at its maximum overflowed the next id; a memory configuration declaring down a node it does not name indexed past the addresses; `restore` refuses both",
    "zookeeper records": "1: a DDP manager state at the last epoch overflowed on its first change; `manager::check_state` refuses it",
}

def found(name):
    for k, v in FOUND.items():
        if name.startswith(k):
            return v
    return "0"

rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("<!-- part fuzz -->")
print("### Fuzzing\n")
print("Every decoder that reads bytes from another party is fuzzed by a seeded mutation fuzzer on stable Rust "
      "(`crates/fuzz`): random bytes, fresh valid encodings (many made by running the protocols themselves) and "
      "structure-aware mutations of a corpus that grows with every new outcome; a counting allocator checks the "
      "memory bounds. `cargo test` runs each target about a second; the table comes from a long run:\n")
print("```\nTANDEM_FUZZ_SECS=60 TANDEM_FUZZ_REPORT=FILE cargo test -p tandem-fuzz -p tandem-cluster fuzz -- --nocapture\n```\n")
print("| target | executions | seconds | crashes in this run | found by the target and fixed (a regression test keeps the input) |")
print("|---|---:|---:|---:|---|")
for name, execs, secs, crashes in sorted(rows):
    print(f"| {name} | {int(execs):,} | {float(secs):.0f} | {crashes} | {found(name)} |")
print("<!-- /part fuzz -->")
