#!/usr/bin/env bash
# What real network faults need: nftables (packet drops, loss, blackholes)
# and iproute2 (`ip`, to bring a namespace's loopback up), from Debian.
#
#   usage: scripts/netfault.sh install|check
#     install  install the packages that are missing (root, apt-get)
#     check    exit 0 if both tools are present and this user may create a
#              network namespace, else say why (exit 3)
#
# Exit status 3 means the tools are missing and cannot be installed here (no
# apt-get, or not root), or namespaces are not allowed: callers may skip on
# that, and only on that.
set -euo pipefail

die() { echo "netfault.sh: $1" >&2; exit "${2:-1}"; }

missing() {
    local m=()
    command -v nft >/dev/null || m+=(nftables)
    command -v ip >/dev/null || m+=(iproute2)
    echo "${m[@]}"
}

install() {
    local need
    need="$(missing)"
    [ -z "$need" ] && return 0
    command -v apt-get >/dev/null || die "missing $need and there is no apt-get" 3
    [ "$(id -u)" -eq 0 ] || die "missing $need; run 'apt-get install $need' as root" 3
    echo "netfault.sh: installing Debian's $need" >&2
    export DEBIAN_FRONTEND=noninteractive
    local log
    log="$(mktemp)"
    # shellcheck disable=SC2086
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $need; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "apt-get install $need failed" 3
    fi
    rm -f "$log"
}

check() {
    [ -z "$(missing)" ] || die "missing $(missing) (run: bash scripts/netfault.sh install)" 3
    unshare -n true 2>/dev/null || die "this user cannot create a network namespace (needs root)" 3
}

case "${1:-}" in
    install) install ;;
    check) check ;;
    *) die "usage: $0 install|check" ;;
esac
