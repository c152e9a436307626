#!/usr/bin/env bash
# Builds Strata and runs the whole test suite (unit, conformance, reference; gpu tests skip without a GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$build_dir"
# One test at a time: most tests use every core (oneDNN and OpenMP threads), and oversubscribed OpenMP teams
# spin against each other.
status=0
ctest --output-on-failure --timeout 1800 "$@" || status=$?
# The conformance counts (ctest keeps a passing test's output only in its log).
grep -h "ONNX node tests:" Testing/Temporary/LastTest.log 2>/dev/null || true
exit "$status"
