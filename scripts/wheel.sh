#!/usr/bin/env bash
# Makes dist/rankcheck-VERSION-py3-none-manylinux_2_N_ARCH.whl from the release binary
# (scripts/release.sh's dist/rankcheck, made first when missing) and python/rankcheck:
#   scripts/wheel.sh [BINARY]
# then, anywhere with Python 3.8+ and glibc 2.27+: pip install dist/rankcheck-*.whl
# (scripts/wheel.py says how the tag is measured.)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -eq 0 && ! -x dist/rankcheck ]]; then
  scripts/release.sh
fi
scripts/setup.sh release >/dev/null
exec python3 scripts/wheel.py "$@"
