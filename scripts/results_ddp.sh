#!/usr/bin/env bash
# Regenerates the DDP section of docs/RESULTS.md alone: the bench runs, the
# checks, the `ddp` part rendered by scripts/render_ddp.py and put in place by
# scripts/assemble_results.py (every other block kept), then `tandem
# experiment ddp-heatmap` and `ddp-sweeps` (which rewrite their own sections
# and figures).
#   usage: scripts/results_ddp.sh [--runs-only|--render-only]   (about 16 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p tandem
T="$CARGO_TARGET_DIR/release/tandem"
OUT="$CARGO_TARGET_DIR/results"
mkdir -p "$OUT"
run() { echo "+ $*" >&2; "$@"; }
ddp_runs() {
  run $T ddp bench --models all --workload ycsb-a --json $OUT/ddp-bench-a.json
  run $T ddp bench --models all --workload ycsb-b --json $OUT/ddp-bench-b.json
  run $T ddp bench --models lin-synch,causal-synch,causal-eventual --clients 2 --json $OUT/ddp-bench-10clients.json
  run $T ddp bench --models lin-synch,causal-synch,causal-eventual --rtt-ns 2000 --json $OUT/ddp-bench-rtt2us.json
  run $T ddp bench --models all --workload ycsb-a --cores 20 --json $OUT/ddp-bench-a-20cores.json
  run $T ddp bench --models lin-synch,causal-synch,causal-eventual --clients 2 --cores 20 --json $OUT/ddp-bench-10clients-20cores.json
  run $T ddp bench --models lin-synch,causal-synch,causal-eventual --rtt-ns 2000 --cores 20 --json $OUT/ddp-bench-rtt2us-20cores.json
  run $T ddp bench --net tcp --models all --workload ycsb-a --seconds 2 --json $OUT/ddp-tcp-a.json
  # Wall-clock speed spreads widely on a shared host: five runs, the median reported.
  for i in 1 2 3 4 5; do
    run $T ddp bench --models lin-synch --measure-ns 50000000 --json $OUT/ddp-simspeed-$i.json
  done
  # A check that finds violations still writes its JSON, and the rendered table reports them.
  run $T ddp check --seeds 100 --json $OUT/ddp-check.json || true
  run $T ddp check --seeds 100 --crash recovery --json $OUT/ddp-check-recovery.json || true
  run $T ddp check --seeds 30 --crash membership --json $OUT/ddp-check-membership.json || true
  run $T ddp check --seeds 30 --crash copy-source --json $OUT/ddp-check-copy-source.json || true
}
if [ "${1:-}" = "--runs-only" ]; then ddp_runs; exit 0; fi
[ "${1:-}" = "--render-only" ] || ddp_runs
[ -f $OUT/net-echo.json ] || run $T net echo --json $OUT/net-echo.json
mkdir -p "$OUT/parts"
python3 scripts/render_ddp.py "$OUT" > "$OUT/parts/ddp.md"
python3 scripts/assemble_results.py --doc docs/RESULTS.md "$OUT/parts/ddp.md"
[ "${1:-}" = "--render-only" ] && exit 0
run $T experiment ddp-heatmap
run $T experiment ddp-sweeps
echo "wrote the DDP part of docs/RESULTS.md" >&2
