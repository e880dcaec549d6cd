#!/usr/bin/env bash
# The same client on both sides: redis-benchmark, unmodified, against
# `tandem serve` (Pandora) and Redis (scripts/peers.sh: one server, no
# replication, no AOF, no RDB), with the same connections, pipeline depth,
# key space and value size, in alternating rounds. Writes the `resp` part
# of docs/RESULTS.md (RESULTS_OUT, RESULTS_DOC, TANDEM_BIN as results.sh).
#   usage: scripts/results_resp.sh     (about 2 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${TANDEM_BIN:-}" ] || cargo build --release -q
T=${TANDEM_BIN:-./target/release/tandem}
OUT=${RESULTS_OUT:-target/results}/resp
DOC=${RESULTS_DOC:-docs/RESULTS.md}
ROUNDS=${RESP_ROUNDS:-3}
mkdir -p "$OUT" "$OUT/../parts"
run() { echo "+ $*" >&2; "$@"; }

bash scripts/peers.sh install redis >&2
bash scripts/peers.sh start redis >&2
REDIS_PORT="${PEERS_REDIS_PORT:-26379}"
TANDEM_PORT=27379
$T serve --port $TANDEM_PORT --keys 300000 >/dev/null &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true; bash scripts/peers.sh stop redis >&2 || true' EXIT
for _ in $(seq 100); do redis-cli -p $TANDEM_PORT ping >/dev/null 2>&1 && break; sleep 0.1; done

# Connections and pipeline depth: one request in flight per connection, and 16.
for r in $(seq "$ROUNDS"); do
  for side in tandem redis; do
    port=$TANDEM_PORT; [ $side = redis ] && port=$REDIS_PORT
    for p in 1 16; do
      run redis-benchmark -p $port -c 50 -P $p -n 200000 -r 100000 -d 16 -t set,get,incr,mset --csv \
        > "$OUT/$side-P$p-$r.csv"
    done
  done
done
python3 scripts/render_resp.py "$OUT" > "$OUT/../parts/resp.md"
python3 scripts/assemble_results.py --doc "$DOC" "$OUT/../parts/resp.md"
