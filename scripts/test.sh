#!/usr/bin/env bash
# Builds Strata and runs the whole test suite (unit, conformance, reference; gpu tests skip without a GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$build_dir"
ctest --output-on-failure --timeout 1800 -j "$(nproc)" "$@"
