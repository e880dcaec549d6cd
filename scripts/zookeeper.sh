#!/usr/bin/env bash
# A standalone ZooKeeper on loopback for `tandem membership --zookeeper`
# (pandora.txt §3.2.4: the failure detector's state lives in ZooKeeper).
#
#   usage: scripts/zookeeper.sh install|start|stop|status
#     install  install Debian's `zookeeper` package if it is missing
#     start    install if needed, start a server on 127.0.0.1:$ZK_PORT, wait until it answers
#     stop     stop the server on $ZK_PORT (its data is kept; `start` resumes it)
#     status   exit 0 if the server on $ZK_PORT answers `ruok`
#
#   ZK_PORT  client port (default 2181)
#   ZK_DIR   data and log directory (default target/zookeeper/$ZK_PORT)
#
# Exit status 3 means ZooKeeper is not installed and cannot be (no apt-get, or
# not root): callers may skip on that, and only on that.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${ZK_PORT:-2181}"
DIR="${ZK_DIR:-$PWD/target/zookeeper/$PORT}"
JAR=/usr/share/java/zookeeper.jar
PIDFILE="$DIR/zookeeper.pid"

die() { echo "zookeeper.sh: $1" >&2; exit "${2:-1}"; }

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

# Answers `imok` to the four-letter word `ruok` (bash's /dev/tcp: no netcat needed).
ruok() {
    local reply
    reply="$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT && printf ruok >&3 && cat <&3" 2>/dev/null || true)"
    [ "$reply" = imok ]
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
        echo "zookeeper.sh: already running on 127.0.0.1:$PORT" >&2
        return 0
    fi
    mkdir -p "$DIR/data"
    cat >"$DIR/zoo.cfg" <<EOF
tickTime=500
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
EOF
    # Debian's layout: zookeeper.jar names its dependencies in its manifest's
    # Class-Path; /etc/zookeeper/conf holds the packaged log4j settings, and
    # slf4j-simple (from libslf4j-java, a dependency) makes the log readable.
    local cp="$JAR"
    [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
    # A fresh session (setsid) so that the server outlives the caller's job control.
    setsid java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -Dzookeeper.log.dir="$DIR" -Dzookeeper.admin.enableServer=false \
        -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zoo.cfg" \
        >"$DIR/zookeeper.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 300); do
        if ruok; then
            echo "zookeeper.sh: ZooKeeper answers on 127.0.0.1:$PORT (data in $DIR)" >&2
            return 0
        fi
        if ! running_pid >/dev/null; then
            cat "$DIR/zookeeper.log" >&2
            die "ZooKeeper exited during start-up"
        fi
        sleep 0.1
    done
    cat "$DIR/zookeeper.log" >&2
    die "ZooKeeper did not answer on 127.0.0.1:$PORT within 30 s"
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
        echo "zookeeper.sh: stopped the server on 127.0.0.1:$PORT" >&2
    fi
    rm -f "$PIDFILE"
}

status() {
    if ruok; then
        echo "zookeeper on 127.0.0.1:$PORT: running"
    else
        echo "zookeeper on 127.0.0.1:$PORT: not running"
        return 1
    fi
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 install|start|stop|status (port: \$ZK_PORT, default 2181)" 2 ;;
esac
