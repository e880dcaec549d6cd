#!/usr/bin/env bash
# A private PostgreSQL cluster on loopback for DART's real-world control
# (docs/DESIGN.md §5: `tandem dart --store postgres`; SERIALIZABLE must pass,
# weaker isolation levels must be caught).
#
#   usage: scripts/postgres.sh install|start|stop|status|url
#     install  install Debian's `postgresql` package if it is missing (as root)
#     start    install if needed, create the cluster in $PG_DIR on first use,
#              start it on 127.0.0.1:$PG_PORT and wait until it accepts connections
#     stop     stop the cluster (its data is kept; `start` resumes it)
#     status   exit 0 if the server on $PG_PORT accepts connections
#     url      print the connection URL
#
#   PG_PORT  port (default 25329, away from a system server's 5432)
#   PG_DIR   data directory (default target/postgres/$PG_PORT)
#
# The cluster trusts loopback connections (user postgres, no password): it is
# a throw-away test fixture. As root, the server runs as the `postgres` user
# (initdb refuses root). Exit status 3: PostgreSQL is not installed and cannot
# be (no apt-get, or not root).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${PG_PORT:-25329}"
DIR="${PG_DIR:-$PWD/target/postgres/$PORT}"
URL="postgres://postgres@127.0.0.1:$PORT/postgres"

die() { echo "postgres.sh: $1" >&2; exit "${2:-1}"; }

bindir() {
    local d
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    [ -n "$d" ] && [ -x "$d/pg_ctl" ] && echo "$d"
}

install() {
    bindir >/dev/null && return 0
    command -v apt-get >/dev/null || die "PostgreSQL is not installed and there is no apt-get to install it" 3
    if [ "$(id -u)" -ne 0 ]; then
        die "PostgreSQL is not installed; run 'apt-get install postgresql' as root" 3
    fi
    echo "postgres.sh: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    local log
    log="$(mktemp)"
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "apt-get install postgresql failed" 3
    fi
    rm -f "$log"
    bindir >/dev/null || die "the postgresql package did not install pg_ctl under /usr/lib/postgresql"
}

# Run a command as the server's owner: `postgres` when we are root.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

ready() {
    local b
    b="$(bindir)" || return 1
    "$b/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 2 >/dev/null 2>&1
}

start() {
    install
    local b
    b="$(bindir)"
    if ready; then
        echo "postgres.sh: already running on 127.0.0.1:$PORT" >&2
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || die "no 'postgres' user to run the server as (install the postgresql package)"
    fi
    mkdir -p "$DIR"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
    chmod 700 "$DIR"
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
        as_owner "$b/initdb" -D "$DIR/data" -U postgres --auth=trust --no-sync -E UTF8 >"$DIR/initdb.log" 2>&1 \
            || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
    fi
    # Sockets in the data directory (the system's /var/run/postgresql may not
    # be writable); a test fixture needs no durability.
    as_owner "$b/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='$DIR' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c max_pred_locks_per_transaction=256 -c deadlock_timeout=10ms" \
        start >/dev/null 2>&1 || { cat "$DIR/server.log" >&2 2>/dev/null || true; die "pg_ctl start failed"; }
    for _ in $(seq 1 300); do
        if ready; then
            echo "postgres.sh: PostgreSQL accepts connections at $URL (data in $DIR)" >&2
            return 0
        fi
        sleep 0.1
    done
    cat "$DIR/server.log" >&2 2>/dev/null || true
    die "PostgreSQL did not accept connections on 127.0.0.1:$PORT within 30 s"
}

stop() {
    local b
    b="$(bindir)" || return 0
    if [ -f "$DIR/data/postmaster.pid" ]; then
        as_owner "$b/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
        echo "postgres.sh: stopped the server on 127.0.0.1:$PORT" >&2
    fi
}

status() {
    if ready; then
        echo "postgres on 127.0.0.1:$PORT: running ($URL)"
    else
        echo "postgres on 127.0.0.1:$PORT: not running"
        return 1
    fi
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    url) echo "$URL" ;;
    *) die "usage: $0 install|start|stop|status|url (port: \$PG_PORT, default 25329)" 2 ;;
esac
