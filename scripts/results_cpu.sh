#!/usr/bin/env bash
# CPU per unit of work, beside the floor measured in the same run, for every
# engine: RESULTS's "CPU per unit of work" section (part `cpu`). About 5
# minutes on 2 cores. Each ratio is measured twice: on a quiet machine and
# with a competing load (a busy loop on one core), to show it measures the
# code, not the neighbours.
#   usage: scripts/results_cpu.sh      (TANDEM_BIN, RESULTS_OUT, RESULTS_DOC as for results.sh)
#   CPU_BEFORE_BIN=path/to/older/tandem adds a before/after table: the two binaries alternated,
#   five pairs each of log recovery (in process and over TCP) and of Pandora's micro bench;
#   CPU_BEFORE_WHAT says in words what changed between them (kept with the runs for re-rendering).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${TANDEM_BIN:-}" ] || cargo build --release -q
T=${TANDEM_BIN:-./target/release/tandem}
OUT=${RESULTS_OUT:-target/results}/cpu
DOC=${RESULTS_DOC:-docs/RESULTS.md}
mkdir -p "$OUT" "$OUT/../parts"
run() { echo "+ $*" >&2; "$@"; }

measure() { # $1: suffix of the JSON files
  local s=$1
  run $T pandora bench --workload micro --fabric sim --rounds 5 --duration 2 --json $OUT/pandora-sim$s.json
  run $T pandora bench --workload micro --fabric sim --compute-nodes 1 --keys 1000 --rounds 3 --duration 2 \
      --json $OUT/pandora-sim-1k$s.json
  run $T pandora recovery-bench --fabric sim --runs 50 --json $OUT/recovery-sim$s.json
  run $T pandora recovery-bench --fabric tcp --runs 50 --json $OUT/recovery-tcp$s.json
  # DDP's nodes beside the echo that carries the same load's messages, in the same rounds.
  run $T ddp bench --net tcp --models lin-synch --seconds 3 --rounds 3 --json $OUT/ddp-tcp$s.json
}

measure ""
run $T pandora bench --workload micro --fabric shm --rounds 3 --duration 2 --json $OUT/pandora-shm.json
run $T pandora bench --workload micro --fabric tcp --rounds 3 --duration 2 --json $OUT/pandora-tcp.json
run $T pandora recovery-bench --fabric shm --runs 50 --json $OUT/recovery-shm.json
# The same over TCP with every process confined to one core: what the second core buys.
if command -v taskset >/dev/null; then
  run taskset -c 0 $T pandora recovery-bench --fabric tcp --runs 50 --json $OUT/recovery-tcp-1cpu.json
fi
# Size independence: 4 M against 0.5 M keys, alternated, five pairs.
for i in 1 2 3 4 5; do
  run $T pandora recovery-bench --fabric tcp --keys 500000 --runs 20 --json $OUT/recovery-tcp-0.5m-$i.json
  run $T pandora recovery-bench --fabric tcp --keys 4000000 --runs 20 --json $OUT/recovery-tcp-4m-$i.json
done
# The message-passing runtime: its cost line, then the stores' nodes beside it.
run $T net echo --nodes 5 --sweep 5,20,80 --seconds 2 --json $OUT/echo-sweep.json
run $T kite bench --net tcp --systems kite,zab --measure-s 3 --json $OUT/kite-tcp.json

# The same with a competing load on one core.
( while :; do :; done ) &
SPIN=$!
trap 'kill $SPIN 2>/dev/null || true' EXIT
measure "-loaded"
kill $SPIN 2>/dev/null || true

if [ -n "${CPU_BEFORE_BIN:-}" ]; then
  echo "${CPU_BEFORE_WHAT:-the binary given as CPU_BEFORE_BIN against this one}" > $OUT/ba-what.txt
  for i in 1 2 3 4 5; do
    for side in before after; do
      B=$T; [ $side = before ] && B=$CPU_BEFORE_BIN
      run $B pandora recovery-bench --fabric sim --runs 30 --json $OUT/ba-recovery-sim-$side-$i.json
      run $B pandora recovery-bench --fabric tcp --runs 30 --json $OUT/ba-recovery-tcp-$side-$i.json
      run $B pandora bench --workload micro --fabric sim --duration 2 --json $OUT/ba-pandora-sim-$side-$i.json
    done
  done
fi

python3 scripts/render_cpu.py "$OUT" > "$OUT/../parts/cpu.md"
python3 scripts/assemble_results.py --doc "$DOC" "$OUT/../parts/cpu.md"
