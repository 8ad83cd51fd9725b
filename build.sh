#!/usr/bin/env bash
# Rebuild the native modules in place (serialised: several developers may share a checkout).
# Usage: ./build.sh [module,...]   e.g. ./build.sh _consumer,_records
set -euo pipefail
cd "$(dirname "$0")"
export KIPCONSUMER_EXTS="${1:-}"
exec flock /tmp/kipconsumer-build.lock .venv/bin/python setup.py -q build_ext --inplace
