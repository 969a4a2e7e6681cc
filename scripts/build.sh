#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR), with warnings as errors.
#   scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build}
# Only rankcheck's own configure notes are shown (which GPU stage, which MPI).
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
      -DRANKCHECK_WERROR=ON "$@" | { grep -E '^-- rankcheck:' || true; }
# shellcheck disable=SC2086  # NINJA_FLAGS: targets and flags, split on purpose
ninja -C "$dir" ${NINJA_FLAGS:-}
