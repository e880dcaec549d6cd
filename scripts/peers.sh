#!/usr/bin/env bash
# The peer systems `tandem compare` measures Tandem against, each a real server
# from Debian's packages on loopback, with its data under target/peers/:
#   postgres  PostgreSQL (package `postgresql`), one server, through scripts/postgres.sh
#   redis     Redis (package `redis-server`), one server, no replication, no AOF, no RDB
#   etcd      etcd (package `etcd-server`, plus `etcd-client` for etcdctl), 3 members, Raft
#   redis-repl  Redis primary plus 2 replicas (`replicaof`, asynchronous), no AOF, no RDB
#   etcd-nofsync  a second 3-member etcd without WAL fsync: `--unsafe-no-fsync` where `etcd --help`
#             lists it, otherwise its data directories on tmpfs (/dev/shm); the mode is written to
#             $PEERS_DIR/etcd-nofsync/mode and printed; `stop` deletes its tmpfs data
#
#   usage: scripts/peers.sh install|start|stop|status [postgres|redis|etcd|redis-repl|etcd-nofsync|ddp|all]
#     (default all; ddp = the three that `tandem compare --system ddp` uses: etcd, etcd-nofsync, redis-repl)
#     install  install the Debian packages that are missing
#     start    install if needed, start the servers, wait until each answers (idempotent)
#     stop     stop the servers (data is kept; `start` resumes them)
#     status   print each server's state; exit 1 if any named one is not running
#   usage: scripts/peers.sh kill-member|start-member etcd|etcd-nofsync N
#     kill-member   kill -9 member N (1-3) of that etcd cluster
#     start-member  start member N again from its data directory and return at once
#                   (it rejoins the cluster; poll its endpoint for its state)
#
#   PEERS_DIR         data directory (default target/peers)
#   (Every default port is below 32768, Linux's ephemeral range: a client
#   socket once took an etcd peer port at 52480 between two runs.)
#   PEERS_PG_PORT     PostgreSQL port (default 25432; user postgres, database postgres, trust auth on loopback)
#   PEERS_REDIS_PORT  Redis port (default 26379)
#   PEERS_REDIS_AOF   on: append-only file with appendfsync everysec (default off)
#   PEERS_ETCD_PORT   client port of member 1 (default 22379); member i listens on +10*(i-1), peers on +1
#   PEERS_REDIS_REPL_PORT   primary's port of redis-repl (default 26380); replicas on +1 and +2
#   PEERS_ETCD_NOFSYNC_PORT client port of etcd-nofsync's member 1 (default 22479), laid out as etcd's
#   PEERS_TMPFS       tmpfs for etcd-nofsync's data when the flag is missing (default /dev/shm)
#
# Exit status 3 means a server is not installed and cannot be (no apt-get, or
# not root): callers may skip on that, and only on that.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${PEERS_DIR:-$PWD/target/peers}"
PG_PORT="${PEERS_PG_PORT:-25432}"
REDIS_PORT="${PEERS_REDIS_PORT:-26379}"
ETCD_FSYNC_PORT="${PEERS_ETCD_PORT:-22379}"
ETCD_NOFSYNC_PORT="${PEERS_ETCD_NOFSYNC_PORT:-22479}"
REPL_PORT="${PEERS_REDIS_REPL_PORT:-26380}"
TMPFS="${PEERS_TMPFS:-/dev/shm}"
# The etcd cluster the etcd_* functions act on (set by use_etcd).
ETCD_PORT="$ETCD_FSYNC_PORT" ETCD_NAME=etcd ETCD_STATE="$DIR/etcd" ETCD_DATA="$DIR/etcd" ETCD_EXTRA=()

die() { echo "peers.sh: $1" >&2; exit "${2:-1}"; }
say() { echo "peers.sh: $*" >&2; }
# Process $1 runs (a zombie waiting for init to reap it does not).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}
# Wait up to 5 s for process $1 to exit after it was asked to, then kill it.
reap() {
    for _ in $(seq 1 500); do alive "$1" || break; sleep 0.01; done
    kill -9 "$1" 2>/dev/null || true
}

apt_install() {
    # $1: what is missing (for messages); rest: packages.
    local what="$1"
    shift
    command -v apt-get >/dev/null || die "$what is not installed and there is no apt-get to install it" 3
    [ "$(id -u)" -eq 0 ] || die "$what is not installed; run 'apt-get install $*' as root" 3
    say "installing Debian's $*"
    export DEBIAN_FRONTEND=noninteractive
    local log
    log="$(mktemp)"
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "apt-get install $* failed" 3
    fi
    rm -f "$log"
}

# Debian never starts the packaged services here (no systemd); ours run on our
# own ports, so a packaged service that does run is left alone.

# ---------------------------------------------------------------- PostgreSQL
# scripts/postgres.sh (DART's PostgreSQL fixture) does the work, on our own
# port and data directory, so a comparison never shares (or drops) the tables
# of another tool. It runs with fsync=off and synchronous_commit=off; `tandem
# compare` reads both settings from the server and reports them.
pg() { PG_PORT="$PG_PORT" PG_DIR="$DIR/postgres" bash scripts/postgres.sh "$@"; }
pg_install() { pg install; }
pg_start() { pg start; }
pg_stop() { pg stop; }
pg_status() { pg status; }

# --------------------------------------------------------------------- Redis
redis_install() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
    apt_install Redis redis-server redis-tools
}

redis_ready() {
    command -v redis-cli >/dev/null || return 1
    [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null || true)" = PONG ]
}

redis_start() {
    redis_install
    local data="$DIR/redis"
    if redis_ready; then
        say "Redis already answers on 127.0.0.1:$REDIS_PORT"
        return 0
    fi
    mkdir -p "$data"
    local aof=(--appendonly no)
    [ "${PEERS_REDIS_AOF:-off}" = on ] && aof=(--appendonly yes --appendfsync everysec)
    # No RDB snapshots either: a background save forking mid-run would be noise.
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode no --dir "$data" \
        --save "" "${aof[@]}" --daemonize yes --pidfile "$data/redis.pid" --logfile "$data/redis.log" ||
        die "redis-server failed to start (log: $data/redis.log)"
    for _ in $(seq 1 100); do
        if redis_ready; then
            say "Redis answers on 127.0.0.1:$REDIS_PORT (data in $data)"
            return 0
        fi
        sleep 0.1
    done
    tail -20 "$data/redis.log" >&2 || true
    die "Redis did not answer on 127.0.0.1:$REDIS_PORT within 10 s"
}

redis_stop() {
    local pidfile="$DIR/redis/redis.pid" pid
    [ -f "$pidfile" ] || return 0
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
        reap "$pid"
        say "stopped Redis on 127.0.0.1:$REDIS_PORT"
    fi
    rm -f "$pidfile"
}

redis_status() {
    if redis_ready; then echo "redis on 127.0.0.1:$REDIS_PORT: running"; else echo "redis on 127.0.0.1:$REDIS_PORT: not running"; return 1; fi
}

# ---------------------------------------------------------------------- etcd
etcd_client_port() { echo $((ETCD_PORT + 10 * ($1 - 1))); }
etcd_peer_port() { echo $((ETCD_PORT + 10 * ($1 - 1) + 1)); }
etcd_endpoints() {
    local e="" i
    for i in 1 2 3; do e="$e${e:+,}http://127.0.0.1:$(etcd_client_port "$i")"; done
    echo "$e"
}

etcd_install() {
    command -v etcd >/dev/null && command -v etcdctl >/dev/null && return 0
    apt_install etcd etcd-server etcd-client
}

# Select the cluster: `etcd` (WAL fsync'd, etcd's default) or `etcd-nofsync`.
use_etcd() {
    ETCD_NAME="$1"
    ETCD_STATE="$DIR/$1"
    ETCD_DATA="$ETCD_STATE"
    ETCD_EXTRA=()
    case "$1" in
        etcd) ETCD_PORT="$ETCD_FSYNC_PORT" ;;
        etcd-nofsync)
            ETCD_PORT="$ETCD_NOFSYNC_PORT"
            if [ -f "$ETCD_STATE/mode" ] && [ "$(cat "$ETCD_STATE/mode")" = tmpfs ]; then
                ETCD_DATA="$TMPFS/tandem-etcd-nofsync-$ETCD_PORT"
            fi
            ;;
    esac
}

# etcd-nofsync: the flag where this etcd has it, else the data on tmpfs (fsync there writes to no device).
etcd_nofsync_mode() {
    mkdir -p "$ETCD_STATE"
    if etcd --help 2>&1 | grep -q -- '--unsafe-no-fsync'; then
        echo unsafe-no-fsync >"$ETCD_STATE/mode"
        ETCD_EXTRA=(--unsafe-no-fsync)
    else
        [ "$(stat -f -c %T "$TMPFS" 2>/dev/null)" = tmpfs ] ||
            die "etcd $(etcd --version | head -1 | awk '{print $3}') has no --unsafe-no-fsync and $TMPFS is not a tmpfs (set PEERS_TMPFS)"
        echo tmpfs >"$ETCD_STATE/mode"
        ETCD_DATA="$TMPFS/tandem-etcd-nofsync-$ETCD_PORT"
    fi
    say "etcd-nofsync: $(cat "$ETCD_STATE/mode")${ETCD_EXTRA[*]:+ flag}$([ "$ETCD_DATA" = "$ETCD_STATE" ] || echo " (data in $ETCD_DATA)")"
}

etcd_member_pid() {
    local pidfile="$ETCD_STATE/m$1.pid" pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    alive "$pid" || return 1
    echo "$pid"
}

etcd_ready() {
    command -v etcdctl >/dev/null || return 1
    ETCDCTL_API=3 timeout 5 etcdctl --endpoints "$(etcd_endpoints)" --command-timeout=2s endpoint health >/dev/null 2>&1
}

etcd_cluster() {
    local i cluster=""
    for i in 1 2 3; do cluster="$cluster${cluster:+,}m$i=http://127.0.0.1:$(etcd_peer_port "$i")"; done
    echo "$cluster"
}

# Launch member $1 of cluster $2 (--initial-cluster), state $3 (new or existing).
etcd_launch() {
    local i="$1" c p
    c="$(etcd_client_port "$i")"
    p="$(etcd_peer_port "$i")"
    # A fresh session (setsid) so that the members outlive the caller's job control.
    setsid etcd --name "m$i" --data-dir "$ETCD_DATA/m$i" "${ETCD_EXTRA[@]}" \
        --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
        --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
        --initial-cluster "$2" --initial-cluster-state "$3" --initial-cluster-token "tandem-$ETCD_NAME" \
        --logger zap --log-outputs stderr >>"$ETCD_STATE/m$i.log" 2>&1 </dev/null &
    echo $! >"$ETCD_STATE/m$i.pid"
}

etcd_check_member() {
    case "$1" in 1 | 2 | 3) ;; *) die "member must be 1, 2 or 3, not '${1:-}'" 2 ;; esac
}

etcd_kill_member() {
    etcd_check_member "$1"
    local pid
    if pid="$(etcd_member_pid "$1")"; then
        kill -9 "$pid" 2>/dev/null || true
        reap "$pid"
    fi
    rm -f "$ETCD_STATE/m$1.pid"
}

etcd_start_member() {
    etcd_check_member "$1"
    etcd_install
    etcd_member_pid "$1" >/dev/null && return 0
    [ -d "$ETCD_DATA/m$1/member" ] || die "$ETCD_NAME member m$1 has no data in $ETCD_DATA/m$1 (run 'start $ETCD_NAME' first)"
    # The nofsync cluster's flag, if it runs with one.
    [ "$ETCD_NAME" = etcd-nofsync ] && [ "$(cat "$ETCD_STATE/mode" 2>/dev/null)" = unsafe-no-fsync ] && ETCD_EXTRA=(--unsafe-no-fsync)
    etcd_launch "$1" "$(etcd_cluster)" existing
}

etcd_start() {
    etcd_install
    local i cluster state=new
    if etcd_ready; then
        say "$ETCD_NAME already answers on $(etcd_endpoints)"
        return 0
    fi
    mkdir -p "$ETCD_STATE"
    if [ "$ETCD_NAME" = etcd-nofsync ]; then etcd_nofsync_mode; fi
    mkdir -p "$ETCD_DATA"
    cluster="$(etcd_cluster)"
    # Data laid out for other ports (an older default) names peers that are
    # not there: its members would wait for them forever. Start it afresh.
    if [ -d "$ETCD_DATA/m1/member" ] && [ "$(cat "$ETCD_STATE/cluster" 2>/dev/null)" != "$cluster" ]; then
        say "$ETCD_NAME: the data in $ETCD_DATA is for another cluster ($(cat "$ETCD_STATE/cluster" 2>/dev/null || echo 'ports unknown')); starting a fresh one"
        rm -rf "$ETCD_DATA/m1" "$ETCD_DATA/m2" "$ETCD_DATA/m3"
    fi
    echo "$cluster" >"$ETCD_STATE/cluster"
    [ -d "$ETCD_DATA/m1/member" ] && state=existing
    for i in 1 2 3; do
        etcd_member_pid "$i" >/dev/null && continue
        : >"$ETCD_STATE/m$i.log"
        etcd_launch "$i" "$cluster" "$state"
    done
    local deadline=$((SECONDS + 30))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if etcd_ready; then
            say "$ETCD_NAME (3 members) answers on $(etcd_endpoints) (data in $ETCD_DATA)"
            return 0
        fi
        for i in 1 2 3; do
            etcd_member_pid "$i" >/dev/null || { tail -20 "$ETCD_STATE/m$i.log" >&2; die "$ETCD_NAME member m$i exited during start-up (log: $ETCD_STATE/m$i.log)"; }
        done
        sleep 0.1
    done
    die "$ETCD_NAME did not become healthy on $(etcd_endpoints) within 30 s (logs: $ETCD_STATE/m*.log)"
}

etcd_stop() {
    local i pid stopped=0
    for i in 1 2 3; do
        if pid="$(etcd_member_pid "$i")"; then
            kill "$pid" 2>/dev/null || true
            reap "$pid"
            stopped=1
        fi
        rm -f "$ETCD_STATE/m$i.pid"
    done
    [ "$stopped" -eq 0 ] || say "stopped $ETCD_NAME on $(etcd_endpoints)"
    # Data on tmpfs is memory (WAL segments are preallocated, 64 MB each): give it back.
    if [ "$ETCD_DATA" != "$ETCD_STATE" ] && [ -d "$ETCD_DATA" ]; then rm -rf "$ETCD_DATA"; fi
}

etcd_status() {
    if etcd_ready; then echo "$ETCD_NAME on $(etcd_endpoints): running"; else echo "$ETCD_NAME on $(etcd_endpoints): not running"; return 1; fi
}

# ------------------------------------------------------ Redis with replicas
# A primary and two replicas (`replicaof`, asynchronous replication), each its own
# server on its own port, no AOF, no RDB: every copy is in memory only.
repl_port() { echo $((REPL_PORT + $1)); } # 0: primary, 1-2: replicas

repl_ping() { [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null || true)" = PONG ]; }

repl_ready() {
    command -v redis-cli >/dev/null || return 1
    local n
    n="$(timeout 2 redis-cli -h 127.0.0.1 -p "$(repl_port 0)" info replication 2>/dev/null | tr -d '\r' | sed -n 's/^connected_slaves://p')"
    [ "${n:-0}" -ge 2 ]
}

repl_install() { redis_install; }

repl_start() {
    redis_install
    local i port data
    if repl_ready; then
        say "Redis with 2 replicas already answers on 127.0.0.1:$(repl_port 0)"
        return 0
    fi
    for i in 0 1 2; do
        port="$(repl_port "$i")"
        data="$DIR/redis-repl/s$i"
        repl_ping "$port" && continue
        mkdir -p "$data"
        local role=()
        [ "$i" -gt 0 ] && role=(--replicaof 127.0.0.1 "$(repl_port 0)")
        redis-server --port "$port" --bind 127.0.0.1 --protected-mode no --dir "$data" \
            --save "" --appendonly no "${role[@]}" --daemonize yes --pidfile "$data/redis.pid" --logfile "$data/redis.log" ||
            die "redis-server (redis-repl s$i) failed to start (log: $data/redis.log)"
    done
    for _ in $(seq 1 200); do
        if repl_ready; then
            say "Redis primary on 127.0.0.1:$(repl_port 0), replicas on $(repl_port 1) and $(repl_port 2) (data in $DIR/redis-repl)"
            return 0
        fi
        sleep 0.1
    done
    tail -5 "$DIR"/redis-repl/s*/redis.log >&2 || true
    die "Redis primary on 127.0.0.1:$(repl_port 0) did not see 2 replicas within 20 s"
}

repl_stop() {
    local i pidfile pid stopped=0
    for i in 2 1 0; do
        pidfile="$DIR/redis-repl/s$i/redis.pid"
        [ -f "$pidfile" ] || continue
        pid="$(cat "$pidfile")"
        if kill -0 "$pid" 2>/dev/null; then
            timeout 5 redis-cli -h 127.0.0.1 -p "$(repl_port "$i")" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
            reap "$pid"
            stopped=1
        fi
        rm -f "$pidfile"
    done
    [ "$stopped" -eq 0 ] || say "stopped Redis with replicas on 127.0.0.1:$(repl_port 0)-$(repl_port 2)"
}

repl_status() {
    if repl_ready; then echo "redis-repl on 127.0.0.1:$(repl_port 0) (+2 replicas): running"; else echo "redis-repl on 127.0.0.1:$(repl_port 0): not running"; return 1; fi
}

# ---------------------------------------------------------------------- main
action="${1:-}"
which="${2:-all}"
case "$action" in
    kill-member | start-member)
        case "$which" in etcd | etcd-nofsync) ;; *) die "$action takes etcd or etcd-nofsync, not '$which'" 2 ;; esac
        mkdir -p "$DIR"
        use_etcd "$which"
        "etcd_${action//-/_}" "${3:-}"
        exit 0
        ;;
esac
case "$which" in
    all) systems=(postgres redis etcd redis-repl etcd-nofsync) ;;
    ddp) systems=(etcd etcd-nofsync redis-repl) ;;
    postgres | redis | etcd | redis-repl | etcd-nofsync) systems=("$which") ;;
    *) die "unknown system '$which' (expected postgres, redis, etcd, redis-repl, etcd-nofsync, ddp or all)" 2 ;;
esac
prefix() { case "$1" in postgres) echo pg ;; redis-repl) echo repl ;; etcd*) echo etcd ;; *) echo "$1" ;; esac; }

mkdir -p "$DIR"
rc=0
for s in "${systems[@]}"; do
    p="$(prefix "$s")"
    case "$s" in etcd*) use_etcd "$s" ;; esac
    case "$action" in
        install) "${p}_install" ;;
        start) "${p}_start" ;;
        stop) "${p}_stop" ;;
        status) "${p}_status" || rc=1 ;;
        *) die "usage: $0 install|start|stop|status [postgres|redis|etcd|redis-repl|etcd-nofsync|ddp|all], or kill-member|start-member etcd|etcd-nofsync N" 2 ;;
    esac
done
exit "$rc"
