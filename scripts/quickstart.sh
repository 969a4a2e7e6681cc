#!/usr/bin/env bash
# Installs what is missing, builds, and runs a whole job of 4 members on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
scripts/build.sh
exec build/rankcheck local -n 4 "$@"
