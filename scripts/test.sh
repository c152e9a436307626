#!/usr/bin/env bash
# Builds Strata and runs the whole test suite (unit, conformance, reference; gpu tests skip without a GPU), then
# the unit tests again under ASan+UBSan, and a 2-rank DDP run under LeakSanitizer (scripts/sanitize.sh asan -L unit,
# its own build in build-asan/; docs/sanitizers.md says what it costs). STRATA_SKIP_SANITIZE=1 skips that part.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
# CUDA code for the H100/H200 architecture only (sm_90; build.sh alone builds sm_80 too): nothing runs it here, the
# build checks that it compiles, and a second architecture adds 35% to the CUDA files' compile time (about 85 s of CPU).
bash "$root/scripts/build.sh" -DCMAKE_CUDA_ARCHITECTURES="${STRATA_CUDA_ARCHITECTURES:-90}"
cd "$build_dir"
# The unit tests two at a time: small processes whose start-up dominates (a few hundred ms each, 780 of them).
# Everything else one at a time: most tests use every core (oneDNN and OpenMP threads), and oversubscribed OpenMP
# teams spin against each other.
# Every part runs; the script fails if any did. The ONNX conformance counts come from ctest's log of the second part
# (a passing test's output stays there) rather than from a run of their own.
status=0
ctest --output-on-failure --timeout 1800 -L unit -j2 "$@" || status=$?
ctest --output-on-failure --timeout 1800 -LE unit "$@" || status=$?
grep -h "ONNX node tests:" Testing/Temporary/LastTest.log 2>/dev/null || true
if [ "${STRATA_SKIP_SANITIZE:-0}" != 1 ]; then
  SANITIZE_SKIP_DEPS=1 bash "$root/scripts/sanitize.sh" asan -L unit -j2 || status=$?
fi
exit $status
