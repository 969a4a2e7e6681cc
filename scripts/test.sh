#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: unit tests and the
# integration tests with real processes on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/build.sh
ctest --test-dir build --output-on-failure --timeout 300 -j "${TEST_JOBS:-2}"
