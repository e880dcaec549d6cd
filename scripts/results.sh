#!/usr/bin/env bash
# Regenerates docs/RESULTS.md from fresh measurements on this machine.
# Every figure in that file comes from one of the commands below, run here in
# one go; comparisons are ratios measured within one alternating run.
#   usage: scripts/results.sh            (everything; hours on 2 cores, the soaks and experiments most)
#          scripts/results.sh --engine   (Pandora's throughput, recovery and bug detection alone,
#                                         about 10 minutes; every other section kept)
#   TANDEM_BIN=path/to/tandem measures another binary (an older build, for a before/after table),
#   RESULTS_OUT=dir keeps its JSON apart and RESULTS_DOC=file writes its document elsewhere.
#
# The document is assembled from docs/results/skeleton.md (the order of the sections, the claim
# tables, the prose) by scripts/assemble_results.py. Each stage below renders its part(s) from
# the JSON of its runs into $OUT/parts and assembles at once, so the document is whole after every
# stage; blocks a stage does not render are kept from the current document. `tandem experiment`
# and `tandem compare --markdown` replace their own marked blocks in place.
set -euo pipefail
ENGINE_ONLY=0; [ "${1:-}" = "--engine" ] && ENGINE_ONLY=1
cd "$(dirname "$0")/.."
cargo build --release -q
T=${TANDEM_BIN:-./target/release/tandem}
OUT=${RESULTS_OUT:-target/results}
DOC=${RESULTS_DOC:-docs/RESULTS.md}
mkdir -p "$OUT"
PARTS=$OUT/parts
mkdir -p "$PARTS"
# Put the rendered part file(s) into the document at the places the skeleton marks.
assemble() { python3 scripts/assemble_results.py --doc "$DOC" "$@"; }

run() { echo "+ $*" >&2; "$@"; }
# Measure Tandem on a quiet machine: no peer servers running (they are started for `compare` at the end).
bash scripts/peers.sh stop all >/dev/null 2>&1 || true
# Recovery runs measure real time on two shared cores; a run spoiled by a
# failure-detector false positive exits non-zero and is run again (at most 3 times).
# (Its counter is local: a global `i` would reset the caller's loop variable.)
retry() { local a; for a in 1 2 3; do if run "$@"; then return 0; fi; echo "  (attempt $a failed; running again)" >&2; done; return 1; }

# Pandora: pandora vs ford vs traditional, in-process fabric (verbs execute at once).
run $T pandora bench --store pandora,ford,traditional --workload micro --fabric sim --write-ratio 0.5 \
    --rounds 5 --duration 2 --json $OUT/micro-sim.json
# Pure protocol cost per core: one compute thread, a cache-resident key set, no check.
run $T pandora bench --store pandora --workload micro --fabric sim --compute-nodes 1 --coordinators 4 \
    --keys 1000 --rounds 3 --duration 2 --no-check --json $OUT/micro-sim-1core.json
# Real processes over TCP.
run $T pandora bench --store pandora,ford,traditional --workload micro --fabric tcp --write-ratio 0.5 \
    --rounds 3 --duration 2 --json $OUT/micro-tcp.json
# Deep pipelines: 512 coordinators per compute node keep hundreds of verbs in flight.
run $T pandora bench --store pandora,ford --workload micro --fabric tcp --write-ratio 0.5 --coordinators 512 \
    --rounds 3 --duration 2 --json $OUT/micro-tcp-512.json
# The tcp fabric beside the physical limit: the same frames echoed over the
# same loopback sockets, alternating with it at each depth.
for d in 1 16 64 512; do
  run $T pandora fabric-bench --fabric tcp --depth $d --threads 2 --duration 2 --json $OUT/fabric-tcp-d$d.json
  run $T pandora fabric-bench --fabric echo --depth $d --threads 2 --duration 2 --json $OUT/fabric-echo-d$d.json
  run $T pandora fabric-bench --fabric shm --depth $d --threads 2 --duration 2 --json $OUT/fabric-shm-d$d.json
done
# The shm fabric: the same memory-server processes, their regions mapped by the compute threads.
run $T pandora bench --store pandora,ford,traditional --workload micro --fabric shm --write-ratio 0.5 \
    --rounds 3 --duration 2 --json $OUT/micro-shm.json
# Bank (SmallBank-style) for the traditional-logging overhead.
run $T pandora bench --store pandora,ford,traditional --workload bank --fabric sim \
    --rounds 3 --duration 2 --json $OUT/bank-sim.json

# Pandora's recovery. Log recovery vs coordinators per compute node (paper Table 2),
# over TCP with memory-server processes; 5 ms heartbeat timeout (20 ms at 512,
# where two loaded cores otherwise produce false positives).
for c in 1 8 64 512; do
  t=5; [ "$c" = 512 ] && t=20
  retry $T pandora recovery --fabric tcp --coordinators $c --timeout-ms $t --json $OUT/recovery-tcp-c$c.json
  retry $T pandora recovery --fabric shm --coordinators $c --timeout-ms $t --json $OUT/recovery-shm-c$c.json
done
# Log recovery at 512 over TCP again, five more runs: its spread, beside the table's single run.
for i in 1 2 3 4 5; do
  retry $T pandora recovery --fabric tcp --coordinators 512 --timeout-ms 20 --json $OUT/recovery-tcp-c512-r$i.json
done
# Recovery time independent of dataset size (in-process fabric: loading 4 M keys over TCP is slow here).
# A few hundred microseconds on two shared cores: nine runs of each size, alternating; medians compared.
rm -f $OUT/recovery-sim-k*-r*.json   # no stale run stands in for a missing one
for i in 1 2 3 4 5 6 7 8 9; do
  for k in 500000 4000000; do
    retry $T pandora recovery --fabric sim --coordinators 64 --keys $k --json $OUT/recovery-sim-k$k-r$i.json
  done
done

# Baselines' recovery: ford scans every lock word with the world stopped; traditional reads its lock logs.
for k in 100000 1000000; do
  retry $T pandora recovery --store ford --fabric sim --coordinators 64 --keys $k --json $OUT/recovery-ford-k$k.json
done
retry $T pandora recovery --store traditional --fabric sim --coordinators 64 --keys 1000000 --json $OUT/recovery-traditional-k1000000.json
retry $T pandora recovery --store pandora --fabric sim --coordinators 64 --keys 1000000 --json $OUT/recovery-pandora-k1000000.json

# Memory-node loss on real threads (in-process fabric): pause, move primaries, run degraded, re-replicate.
retry $T pandora recovery --fail-memory-node 1 --coordinators 16 --keys 100000 --duration 2.5 --json $OUT/memfail.json

# Parts machine, engine, recovery and bugs of the Pandora section.
if [ "$ENGINE_ONLY" = 1 ]; then
  python3 scripts/render_results.py "$OUT" --engine-only > "$PARTS/pandora.md"
  assemble "$PARTS/pandora.md"
  exit 0
fi
python3 scripts/render_results.py "$OUT" > "$PARTS/pandora.md"
assemble "$PARTS/pandora.md"

# DART. A million litmus transactions on correct pandora with crashes, the baselines,
# each of FORD's six bugs (the budgets of crates/dart/tests/mutants.rs), and PostgreSQL.
run $T dart --store pandora --seeds 2500 --crash-rate 0.5 --jobs 2 --json $OUT/dart-long.json
run $T dart --store ford --seeds 300 --crash-rate 0.5 --json $OUT/dart-ford.json
run $T dart --store traditional --seeds 300 --crash-rate 0.5 --json $OUT/dart-traditional.json
# Over real processes: memory servers, membership, litmus-worker processes; one kill -9 per run.
run $T dart --store pandora --fabric tcp --crash-rate 1 --seeds 30 --compute-nodes 3 --clients 4 --txs 60 --json $OUT/dart-procs.json
# ... and a memory-server kill -9 mid-run in every run, its replacement admitted before the final check.
run $T dart --store pandora --fabric tcp --crash-rate 1 --memory-kill-rate 1 --seeds 30 --compute-nodes 3 --clients 4 --txs 60 --json $OUT/dart-procs-memkill.json
bug() { # store bug tests instances crash-rate txs budget [extra bug]
  local extra=""; [ -n "${8:-}" ] && extra="--inject-bug $8"
  run $T dart --store $1 --inject-bug $2 $extra --tests $3 --instances $4 --crash-rate $5 --txs $6 --seeds $7 \
      --stop-at-first --json $OUT/dart-bug-$2-$1.json || true   # a caught bug exits non-zero
}
bug pandora complicit-abort litmus-1 1 0 60 80
bug ford complicit-abort litmus-1 1 0 60 80
bug ford covert-locks 2 2 0 60 10
bug ford relaxed-locks 2 2 0 60 40
bug ford missing-insert-undo litmus-1-insert-delete 1 1 30 60
bug traditional lost-decision 3 1 1 60 20
bug traditional logging-without-locking 3 1 1 60 100 trust-undo-images
bash scripts/postgres.sh start
for iso in serializable repeatable-read read-committed; do
  run $T dart --store postgres --isolation $iso --seeds 20 --json $OUT/dart-pg-$iso.json || true
done
python3 scripts/render_dart.py "$OUT" > "$PARTS/dart.md"
assemble "$PARTS/dart.md"

# False suspicion. The demo scenario 100 times with random stalls, crashes and a competing
# load; the seeded simulation of the same faults, and revocable fencing re-injected.
run $T pandora soak --runs 100 --json $OUT/soak.json
run $T pandora sim-suspicion --seeds 1000 --json $OUT/sim-suspicion.json
run $T pandora sim-suspicion --seeds 1000 --inject-bug revocable-fencing --json $OUT/sim-suspicion-revocable.json || true
# DART's default campaign (no --tests, default crash rate) against each of FORD's six bugs, in the mode where it lives.
default_bug() { # store bug [extra bug]
  local extra=""; [ -n "${3:-}" ] && extra="--inject-bug $3"
  run $T dart --store $1 --inject-bug $2 $extra --seeds 300 --stop-at-first --json $OUT/dart-default-$1-$2.json || true
}
for s in pandora ford; do default_bug $s complicit-abort; default_bug $s covert-locks; default_bug $s relaxed-locks; done
default_bug ford missing-insert-undo
default_bug traditional lost-decision
default_bug traditional logging-without-locking trust-undo-images
python3 scripts/render_fencing.py "$OUT" > "$PARTS/fencing.md"   # parts fencing and dart-default
assemble "$PARTS/fencing.md"

# DDP models in simulated time, their checks, and the runtime's ceiling over TCP.
# CPU per unit of work, every engine beside its floor (its own script renders and assembles).
TANDEM_BIN=$T RESULTS_OUT=$OUT RESULTS_DOC=$DOC run bash scripts/results_cpu.sh

# (scripts/results_ddp.sh regenerates this part alone; here only its runs.)
CARGO_TARGET_DIR=target run bash scripts/results_ddp.sh --runs-only
run $T net echo --json $OUT/net-echo.json
python3 scripts/render_ddp.py "$OUT" > "$PARTS/ddp.md"
assemble "$PARTS/ddp.md"
# Real faults: 20 seeded schedules per system on processes in a network namespace (root).
for SYS in pandora ddp heal kite zab; do
  NEMESIS="$T nemesis --system $SYS --schedules 20 --seed 100"
  run $NEMESIS --out $OUT/nemesis-$SYS --json $OUT/nemesis-$SYS.json || true
  python3 scripts/render_nemesis.py $OUT/nemesis-$SYS.json "${NEMESIS/#$T/tandem}" $SYS > "$PARTS/nemesis-$SYS.md"
  assemble "$PARTS/nemesis-$SYS.md"
done
# Pandora with its failure detector replicated over ZooKeeper.
# DDP's Transactional family too (the default DDP model is lin-synch).
NEMESIS="$T nemesis --system ddp --model trans-synch --schedules 20 --seed 100"
run $NEMESIS --out $OUT/nemesis-ddp-trans --json $OUT/nemesis-ddp-trans.json || true
python3 scripts/render_nemesis.py $OUT/nemesis-ddp-trans.json "${NEMESIS/#$T/tandem}" ddp-trans > "$PARTS/nemesis-ddp-trans.md"
assemble "$PARTS/nemesis-ddp-trans.md"
NEMESIS="$T nemesis --system pandora --membership zookeeper --schedules 20 --seed 100"
run $NEMESIS --out $OUT/nemesis-pandora-zk --json $OUT/nemesis-pandora-zk.json || true
python3 scripts/render_nemesis.py $OUT/nemesis-pandora-zk.json "${NEMESIS/#$T/tandem}" pandora-zk > "$PARTS/nemesis-pandora-zk.md"
assemble "$PARTS/nemesis-pandora-zk.md"
# Delay and slow nodes through the link proxy, every system; DART's workers under network faults.
SLOW=""
for SYS in pandora ddp heal kite zab; do
  run $T nemesis --system $SYS --faults delay,slow --schedules 5 --seed 100 --out $OUT/nemesis-slow-$SYS --json $OUT/nemesis-slow-$SYS.json || true
  SLOW="$SLOW $SYS=$OUT/nemesis-slow-$SYS.json"
done
DART_NET="$T dart --store pandora --fabric tcp --net-faults all --seeds 10 --seed 20 --txs 2000"
run $DART_NET --json $OUT/dart-net.json || true
python3 scripts/render_nemesis_slow.py "tandem nemesis --system SYS --faults delay,slow --schedules 5 --seed 100" \
  $OUT/dart-net.json "${DART_NET/#$T/tandem}" $SLOW > "$PARTS/nemesis-slow.md"
assemble "$PARTS/nemesis-slow.md"

# Slot reclamation. TATP and bounded-history TPC-C at full speed, 10 minutes each with
# reclamation and 10 without (SOAK_SECS shortens them), occupancy and memory sampled every 10 s.
for w in tatp tpcc-bounded; do
  run $T pandora table-soak --workload $w --duration ${SOAK_SECS:-600} --reclaim both --json $OUT/soak-$w.json --figure docs/figures/soak-$w
done
python3 scripts/render_soak.py "$OUT" > "$PARTS/soak.md"
assemble "$PARTS/soak.md"

# The papers' experiments, one command each; each writes
# docs/results/NAME.json, docs/figures/NAME.{svg,png} and its section of docs/RESULTS.md.
run $T experiment all
# A follower's catch-up, HEAL against a real ZooKeeper ensemble and etcd cluster
# (it starts and stops its own servers, on ports of their own; about 6 minutes).
run $T experiment heal-peers
# Side by side with the stores users would pick instead (real servers from Debian).
run bash scripts/peers.sh start all
# Pandora against PostgreSQL, Redis and etcd: every system at 1, 4, 16, 64 and 256 clients, three rounds alternating the systems;
# each reported at its best, Tandem over TCP and on shm (about 10 minutes each).
run $T compare --workload smallbank --clients 1,4,16,64,256 --rounds 3 --duration 3 --json docs/results/compare-smallbank.json --markdown docs/RESULTS.md
run $T compare --workload micro --clients 1,4,16,64,256 --rounds 3 --duration 3 --json docs/results/compare-micro.json --markdown docs/RESULTS.md
# The same Redis client against Tandem and Redis (its own Redis, started and stopped).
TANDEM_BIN=$T RESULTS_OUT=$OUT RESULTS_DOC=$DOC run bash scripts/results_resp.sh
# DDP's node processes beside etcd (with and without WAL fsync) and Redis with replicas.
run $T compare --system ddp --workload both --duration 5 --json docs/results/compare-ddp.json --markdown docs/RESULTS.md
# Kite's node processes beside a 3-member ZooKeeper and etcd, without and with fsync
# (it starts and stops its own servers; about 3 minutes).
run $T compare --system kite --fsync both --warmup 5 --duration 10 --json docs/results/compare-kite.json --markdown docs/RESULTS.md
bash scripts/peers.sh stop all >/dev/null 2>&1 || true
bash scripts/postgres.sh stop >/dev/null 2>&1 || true
# Fuzzing: every decoder of untrusted bytes, ${FUZZ_SECS:-60} s per target.
rm -f docs/results/fuzz-report.tsv
TANDEM_FUZZ_SECS=${FUZZ_SECS:-60} TANDEM_FUZZ_REPORT=$PWD/docs/results/fuzz-report.tsv \
  run cargo test -p tandem-fuzz -p tandem-cluster fuzz -- --nocapture   # the test profile: overflow checks on
python3 scripts/render_fuzz.py docs/results/fuzz-report.tsv > "$PARTS/fuzz.md"
assemble "$PARTS/fuzz.md"
echo "wrote docs/RESULTS.md" >&2
