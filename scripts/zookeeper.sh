#!/usr/bin/env bash
# A standalone ZooKeeper on loopback for `tandem pandora membership --zookeeper`
# (Pandora §3.2.4: the failure detector's state lives in ZooKeeper).
#
#   usage: scripts/zookeeper.sh install|start|stop|status
#     install  install Debian's `zookeeper` package if it is missing
#     start    install if needed, start a server on $ZK_ADDR:$ZK_PORT, wait until it answers
#     stop     stop the server on $ZK_PORT (its data is kept; `start` resumes it)
#     status   exit 0 if the server on $ZK_PORT answers `ruok`
#
#   ZK_ADDR  the standalone server's address (default 127.0.0.1; the nemesis gives it one of its own)
#   ZK_PORT  client port (default 2181)
#   ZK_DIR   data and log directory (default target/zookeeper/$ZK_PORT)
#
# A 3-member ensemble on loopback (QuorumPeerMain), for `tandem experiment heal-peers`:
#   usage: scripts/zookeeper.sh start-ensemble|stop-ensemble|status-ensemble|kill-member N|start-member N
#     start-ensemble   install if needed, start the members not running, wait until one leads and two follow
#     stop-ensemble    stop every member (data is kept)
#     status-ensemble  print each member's client port and mode; exit 1 if any does not answer
#     kill-member N    kill -9 member N (1-3)
#     start-member N   start member N again from its data and return at once (poll `srvr` for its state)
#
#   ZK_ENSEMBLE_PORT  client port of member 1 (default 24281); member i listens for clients on
#                     +10*(i-1), for its quorum on +1 and for leader election on +2
#   ZK_FORCE_SYNC     yes (ZooKeeper's default: fsync the transaction log before acknowledging) or no
#   ZK_ENSEMBLE_DIR   data and logs (default target/zookeeper/ensemble-$ZK_ENSEMBLE_PORT); member i in m$i
#   The four-letter words srvr, mntr, stat and ruok are enabled (`srvr` prints `Zxid:` and `Mode:`);
#   the members log at INFO, four-letter words aside (m$i/zookeeper.log shows how a follower synced:
#   DIFF, SNAP or TRUNC).
#
# Exit status 3 means ZooKeeper is not installed and cannot be (no apt-get, or
# not root): callers may skip on that, and only on that.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${ZK_PORT:-2181}"
HOST="${ZK_ADDR:-127.0.0.1}"
DIR="${ZK_DIR:-$PWD/target/zookeeper/$PORT}"
JAR=/usr/share/java/zookeeper.jar
PIDFILE="$DIR/zookeeper.pid"

die() { echo "zookeeper.sh: $1" >&2; exit "${2:-1}"; }

# Process $1 runs (a zombie waiting for init to reap it does not).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}

install() {
    [ -f "$JAR" ] && command -v java >/dev/null && return 0
    command -v apt-get >/dev/null || die "ZooKeeper is not installed and there is no apt-get to install it" 3
    if [ "$(id -u)" -ne 0 ]; then
        die "ZooKeeper is not installed; run 'apt-get install zookeeper' as root" 3
    fi
    echo "zookeeper.sh: installing Debian's zookeeper package" >&2
    export DEBIAN_FRONTEND=noninteractive
    local log
    log="$(mktemp)"
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends zookeeper; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "apt-get install zookeeper failed" 3
    fi
    rm -f "$log"
    [ -f "$JAR" ] || die "the zookeeper package did not install $JAR"
}

# The reply to four-letter word $2 on port $1 (bash's /dev/tcp: no netcat needed).
four() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1 && printf $2 >&3 && cat <&3" 2>/dev/null || true
}

# Answers `imok` to the four-letter word `ruok` (on $1, default $PORT).
ruok() {
    [ "$(four "${1:-$PORT}" ruok)" = imok ]
}

# The classpath: Debian's layout. zookeeper.jar names its dependencies in its
# manifest's Class-Path; slf4j-simple (from libslf4j-java, a dependency)
# makes the log readable.
classpath() {
    local cp="$JAR"
    [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
    echo "$cp"
}

running_pid() {
    [ -f "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

start() {
    install
    if running_pid >/dev/null && ruok; then
        echo "zookeeper.sh: already running on $HOST:$PORT" >&2
        return 0
    fi
    mkdir -p "$DIR/data"
    cat >"$DIR/zoo.cfg" <<EOF
tickTime=500
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=$HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
EOF
    local cp
    cp="$(classpath)"
    # A fresh session (setsid) so that the server outlives the caller's job control.
    setsid java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -Dzookeeper.log.dir="$DIR" -Dzookeeper.admin.enableServer=false \
        -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zoo.cfg" \
        >"$DIR/zookeeper.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 300); do
        if ruok; then
            echo "zookeeper.sh: ZooKeeper answers on $HOST:$PORT (data in $DIR)" >&2
            return 0
        fi
        if ! running_pid >/dev/null; then
            cat "$DIR/zookeeper.log" >&2
            die "ZooKeeper exited during start-up"
        fi
        sleep 0.1
    done
    cat "$DIR/zookeeper.log" >&2
    die "ZooKeeper did not answer on $HOST:$PORT within 30 s"
}

stop() {
    local pid
    if pid="$(running_pid)"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        echo "zookeeper.sh: stopped the server on $HOST:$PORT" >&2
    fi
    rm -f "$PIDFILE"
}

status() {
    if ruok; then
        echo "zookeeper on $HOST:$PORT: running"
    else
        echo "zookeeper on $HOST:$PORT: not running"
        return 1
    fi
}

# ------------------------------------------------------------- the ensemble
EPORT="${ZK_ENSEMBLE_PORT:-24281}"
EDIR="${ZK_ENSEMBLE_DIR:-$PWD/target/zookeeper/ensemble-$EPORT}"
member_port() { echo $((EPORT + 10 * ($1 - 1) + ${2:-0})); } # $2: 0 client, 1 quorum, 2 election

member_pid() {
    local pidfile="$EDIR/m$1/zookeeper.pid" pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    alive "$pid" || return 1
    echo "$pid"
}

# A member's mode (leader, follower) from `srvr`; empty while it does not serve.
member_mode() {
    four "$(member_port "$1")" srvr | sed -n 's/^Mode: //p'
}

check_member() {
    case "$1" in 1 | 2 | 3) ;; *) die "member must be 1, 2 or 3, not '${1:-}'" 2 ;; esac
}

write_member_cfg() {
    local i="$1" d="$EDIR/m$1" j
    mkdir -p "$d/data"
    echo "$i" >"$d/data/myid"
    # ZooKeeper's sample settings (tickTime 2000, initLimit 10, syncLimit 5), on loopback.
    {
        echo "tickTime=2000"
        echo "initLimit=10"
        echo "syncLimit=5"
        echo "dataDir=$d/data"
        echo "clientPort=$(member_port "$i")"
        echo "clientPortAddress=127.0.0.1"
        echo "maxClientCnxns=0"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=srvr,mntr,stat,ruok"
        for j in 1 2 3; do echo "server.$j=127.0.0.1:$(member_port "$j" 1):$(member_port "$j" 2)"; done
    } >"$d/zoo.cfg"
}

# Launch member $1 (its JVM) in a fresh session and return at once.
launch_member() {
    local d="$EDIR/m$1"
    [ -f "$d/zoo.cfg" ] || write_member_cfg "$1"
    setsid java -Xmx512m -Dzookeeper.forceSync="${ZK_FORCE_SYNC:-yes}" \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=info -Dorg.slf4j.simpleLogger.showDateTime=true \
        -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn \
        -Dzookeeper.log.dir="$d" -Dzookeeper.admin.enableServer=false \
        -cp "$(classpath)" org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" \
        >>"$d/zookeeper.log" 2>&1 </dev/null &
    echo $! >"$d/zookeeper.pid"
}

# One leader and two followers.
ensemble_ready() {
    local modes
    modes="$(for i in 1 2 3; do echo "$(member_mode "$i")"; done | sort | tr '\n' ' ')"
    [ "$modes" = "follower follower leader " ]
}

start_ensemble() {
    install
    local i
    for i in 1 2 3; do
        member_pid "$i" >/dev/null || launch_member "$i"
    done
    for _ in $(seq 1 600); do
        if ensemble_ready; then
            echo "zookeeper.sh: ensemble of 3 answers on 127.0.0.1:$(member_port 1),$(member_port 2),$(member_port 3) (data in $EDIR)" >&2
            return 0
        fi
        for i in 1 2 3; do
            member_pid "$i" >/dev/null || { tail -20 "$EDIR/m$i/zookeeper.log" >&2; die "ensemble member $i exited during start-up (log: $EDIR/m$i/zookeeper.log)"; }
        done
        sleep 0.1
    done
    die "the ensemble did not elect a leader within 60 s (logs: $EDIR/m*/zookeeper.log)"
}

kill_member() {
    check_member "$1"
    local pid
    if pid="$(member_pid "$1")"; then
        kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 1 500); do alive "$pid" || break; sleep 0.01; done
    fi
    rm -f "$EDIR/m$1/zookeeper.pid"
}

start_member() {
    check_member "$1"
    install
    member_pid "$1" >/dev/null && return 0
    [ -f "$EDIR/m$1/zoo.cfg" ] || die "member $1 has no configuration in $EDIR/m$1 (run start-ensemble first)"
    launch_member "$1"
}

stop_ensemble() {
    local i pid stopped=0
    for i in 1 2 3; do
        if pid="$(member_pid "$i")"; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
            stopped=1
        fi
        rm -f "$EDIR/m$i/zookeeper.pid"
    done
    [ "$stopped" -eq 0 ] || echo "zookeeper.sh: stopped the ensemble on 127.0.0.1:$(member_port 1)" >&2
}

status_ensemble() {
    local i mode rc=0
    for i in 1 2 3; do
        mode="$(member_mode "$i")"
        echo "zookeeper member $i on 127.0.0.1:$(member_port "$i"): ${mode:-not serving}"
        [ -n "$mode" ] || rc=1
    done
    return "$rc"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    start-ensemble) start_ensemble ;;
    stop-ensemble) stop_ensemble ;;
    status-ensemble) status_ensemble ;;
    kill-member) kill_member "${2:-}" ;;
    start-member) start_member "${2:-}" ;;
    *) die "usage: $0 install|start|stop|status (port: \$ZK_PORT, default 2181), or start-ensemble|stop-ensemble|status-ensemble|kill-member N|start-member N" 2 ;;
esac
