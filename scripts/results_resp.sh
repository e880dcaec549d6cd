#!/usr/bin/env bash
# The same client on both sides: redis-benchmark, unmodified, against
# `tandem serve` (Pandora) and Redis (scripts/peers.sh: one server, no
# replication, no AOF, no RDB), with the same connections, pipeline depth,
# key space and value size, in alternating rounds. Then three DDP nodes
# (`tandem node --resp`, ⟨Eventual, Eventual⟩ and ⟨Lin, Synch⟩) beside
# Redis with two asynchronous replicas (scripts/peers.sh redis-repl), with
# an integer value (DDP stores 64-bit integers). Where redis-benchmark cannot
# send the request (a MULTI/EXEC block; SET then WAIT), `tandem resp-bench`
# (the redis crate's client) runs the same way against both. Writes the `resp` part of
# docs/RESULTS.md (RESULTS_OUT, RESULTS_DOC, TANDEM_BIN as results.sh).
#   usage: scripts/results_resp.sh     (about 8 minutes)
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
# The same client where redis-benchmark cannot send the request: a MULTI/EXEC
# block moving one unit between two random keys (`tandem resp-bench`, the
# redis crate), against the same two servers.
rb() {  # name port args...
  local name=$1 port=$2; shift 2
  run $T resp-bench -p "$port" -c 50 -r 100000 --seconds "${RB_SECONDS:-5}" "$@" >> "$OUT/rb-$name.jsonl"
}
rm -f "$OUT"/rb-*.jsonl
for r in $(seq "$ROUNDS"); do
  for p in 1 16; do
    rb tandem-transfer $TANDEM_PORT --workload transfer --prefix acct: -P $p
    rb redis-transfer $REDIS_PORT --workload transfer --prefix acct: -P $p
  done
done
kill $SERVE 2>/dev/null || true

# DDP: three nodes with a manager, each serving RESP; node 0 takes the load.
bash scripts/peers.sh start redis-repl >&2
REPL_PORT="${PEERS_REDIS_REPL_PORT:-26380}"
DDP_DIR=$OUT/ddp-nodes
ddp_start() {  # model
  rm -rf "$DDP_DIR"; mkdir -p "$DDP_DIR"
  local peers=127.0.0.1:27381,127.0.0.1:27382,127.0.0.1:27383
  $T ddp manager --listen 127.0.0.1:27380 --nodes 3 --state "$DDP_DIR/manager.state" >/dev/null 2>"$DDP_DIR/manager.log" &
  DDP_PIDS=$!
  for i in 0 1 2; do
    $T node --model "$1" --id $i --peers $peers --manager 127.0.0.1:27380 --nvm "$DDP_DIR/node$i.nvm" \
      --resp 127.0.0.1:2739$i >/dev/null 2>"$DDP_DIR/node$i.log" &
    DDP_PIDS="$DDP_PIDS $!"
  done
  for _ in $(seq 100); do [ "$(redis-cli -p 27390 -a "$PW" --no-auth-warning set probe 1 2>/dev/null)" = OK ] && return; sleep 0.1; done
  echo "DDP $1 did not serve (logs in $DDP_DIR)" >&2; exit 1
}
ddp_stop() { kill $DDP_PIDS 2>/dev/null || true; wait $DDP_PIDS 2>/dev/null || true; }
export TANDEM_SECRET=$($T keys new)
PW=$($T keys split --out "$OUT/keys" >/dev/null; awk '/^client/ {print $3}' "$OUT/keys/client.keyring")
trap 'kill $SERVE 2>/dev/null || true; ddp_stop; bash scripts/peers.sh stop redis >&2 || true; bash scripts/peers.sh stop redis-repl >&2 || true' EXIT
bench_int() {  # port password-args... -> csv on stdout
  local port=$1; shift
  for p in 1 16; do
    for cmd in "set key:__rand_int__ 42" "get key:__rand_int__"; do
      run redis-benchmark -p "$port" "$@" -c 50 -P $p -n 100000 -r 100000 --csv $cmd | sed "s/^\"/\"P$p /"
    done
  done
}
for model in eventual-eventual lin-synch; do
  for r in $(seq "$ROUNDS"); do
    ddp_start $model
    bench_int 27390 -a "$PW" > "$OUT/ddp-$model-$r.csv"
    ddp_stop
    bench_int "$REPL_PORT" > "$OUT/redisrepl-$model-$r.csv"
  done
done
# ⟨Lin, Synch⟩ acknowledges a write once every replica holds it; Redis, once
# `WAIT 2 0` after it says both replicas do: the same client sends SET to
# DDP, and SET then WAIT (one request) to Redis.
for r in $(seq "$ROUNDS"); do
  ddp_start lin-synch
  for p in 1 16; do rb ddp-lin-synch-set 27390 -a "$PW" --workload set -P $p; done
  ddp_stop
  for p in 1 16; do rb redis-set-wait "$REPL_PORT" --workload set-wait --replicas 2 -P $p; done
done
python3 scripts/render_resp.py "$OUT" > "$OUT/../parts/resp.md"
python3 scripts/assemble_results.py --doc "$DOC" "$OUT/../parts/resp.md"
