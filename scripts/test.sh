#!/usr/bin/env bash
# Builds Strata and runs the whole test suite (unit, conformance, reference; gpu tests skip without a GPU), then
# the unit tests again under ASan+UBSan, and a 2-rank DDP run under LeakSanitizer (scripts/sanitize.sh asan -L unit,
# its own build in build-asan/; docs/sanitizers.md says what it costs). STRATA_SKIP_SANITIZE=1 skips that part.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$build_dir"
# One test at a time: most tests use every core (oneDNN and OpenMP threads), and oversubscribed OpenMP teams
# spin against each other.
# The conformance counts first (a passing test's output stays in ctest's log), then the whole suite, so that
# ctest's summary closes the output.
ctest -L conformance --output-on-failure > /dev/null 2>&1 || true
grep -h "ONNX node tests:" Testing/Temporary/LastTest.log 2>/dev/null || true
ctest --output-on-failure --timeout 1800 "$@"
if [ "${STRATA_SKIP_SANITIZE:-0}" != 1 ]; then
  SANITIZE_SKIP_DEPS=1 bash "$root/scripts/sanitize.sh" asan -L unit
fi
