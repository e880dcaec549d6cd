#!/usr/bin/env bash
# Installs Python's Redis client (redis-py, from PyPI) into target/pyredis
# (or $PYREDIS_DIR) for the RESP tests, and prints that directory (use it as
# PYTHONPATH). Installs python3 and pip with apt-get when missing (root).
# Exit 3: it cannot be installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${PYREDIS_DIR:-target/pyredis}
have() { PYTHONPATH="$DIR" python3 -c "import redis" 2>/dev/null; }
if have; then echo "$DIR"; exit 0; fi
if ! command -v python3 >/dev/null || ! python3 -m pip --version >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip; } >&2 || exit 3
fi
mkdir -p "$DIR"
python3 -m pip install --quiet --target "$DIR" 'redis>=5' >&2 \
    || python3 -m pip install --quiet --break-system-packages --target "$DIR" 'redis>=5' >&2 \
    || exit 3
have || exit 3
echo "$DIR"
