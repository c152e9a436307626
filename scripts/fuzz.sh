#!/usr/bin/env bash
# Builds and runs Strata's libFuzzer targets (tests/fuzz, docs/fuzzing.md).
#
#   scripts/fuzz.sh build                      clang-14 build of the fuzz targets only, in build-fuzz/
#   scripts/fuzz.sh seeds                      (re)generates the seed corpora in build-fuzz/seeds/
#   scripts/fuzz.sh run TARGET|all [-t SECONDS | -n RUNS] [-- LIBFUZZER_ARGS...]
#                                              fuzzes each target for SECONDS (default 60) or RUNS executions;
#                                              new inputs go to build-fuzz/corpus/TARGET, crashes to
#                                              build-fuzz/artifacts/TARGET/, the log to build-fuzz/logs/
#   scripts/fuzz.sh replay [TARGET...]         runs each target once over its regressions, seeds and corpus
#   scripts/fuzz.sh list                       the targets
#
# FUZZ_BUILD_DIR overrides build-fuzz/. FUZZ_SKIP_DEPS=1 skips install-deps.sh. `run` and `replay` build first.
# Each run ends with one line: target, executions, seconds, corpus size, and `crash` or `ok`; the status is
# non-zero when a target crashed, leaked, hung (-timeout, 25 s) or ran out of memory (-rss_limit_mb, 2048).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(store_protocol_fuzzer tensor_proto_fuzzer idx_dataset_fuzzer cifar10_dataset_fuzzer onnx_importer_fuzzer
  ps_message_fuzzer)

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

build_targets() {
  [ "${FUZZ_SKIP_DEPS:-0}" = 1 ] || bash "$root/scripts/install-deps.sh"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # -O1 as libFuzzer's documentation suggests (the CPU backend keeps its own -O3); asserts stay on.
    CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF \
      -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" > /dev/null
  fi
  cmake --build "$build" --target strata_fuzzers --parallel "$(nproc)"
}

seeds() {
  /usr/bin/python3 "$root/scripts/fuzz_seeds.py" "$build/seeds"
}

# The directories a target reads inputs from: its corpus first (libFuzzer writes new inputs to the first).
inputs_of() {
  local t=$1
  mkdir -p "$build/corpus/$t"
  echo "$build/corpus/$t" "$build/seeds/$t"
  [ -d "$root/tests/fuzz/regressions/$t" ] && echo "$root/tests/fuzz/regressions/$t"
  return 0
}

check_target() {
  local t
  for t in "${targets[@]}"; do [ "$t" = "$1" ] && return 0; done
  echo "unknown fuzz target '$1' (scripts/fuzz.sh list)" >&2
  exit 2
}

run_target() {
  local t=$1 limit=$2
  shift 2
  mkdir -p "$build/artifacts/$t" "$build/logs"
  local log
  log="$build/logs/$t-$(date -u +%Y%m%dT%H%M%SZ).log"
  local status=0
  # shellcheck disable=SC2046
  (cd "$build" && "$build/tests/fuzz/$t" $limit -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 \
     -artifact_prefix="$build/artifacts/$t/" "$@" $(inputs_of "$t")) > "$log" 2>&1 || status=$?
  local execs seconds corpus
  execs=$(grep -h '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)
  seconds=$(grep -h '^Done ' "$log" | sed -E 's/.* in ([0-9]+) second.*/\1/' | tail -1)
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  if [ "$status" -eq 0 ]; then
    echo "$t: ${execs:-?} executions in ${seconds:-?} s, corpus $corpus inputs: ok ($(date -u +%F))"
  else
    echo "$t: crash (status $status) after ${execs:-?} executions; log $log; inputs in $build/artifacts/$t/"
    grep -m3 -E 'ERROR|runtime error|==[0-9]+==|terminate' "$log" | sed 's/^/  /' || true
  fi
  return "$status"
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
case "$cmd" in
  list) printf '%s\n' "${targets[@]}" ;;
  build) build_targets ;;
  seeds) seeds ;;
  run)
    [ $# -ge 1 ] || usage
    which=$1
    shift
    limit="-max_total_time=60"
    extra=()
    while [ $# -gt 0 ]; do
      case "$1" in
        -t) limit="-max_total_time=$2"; shift 2 ;;
        -n) limit="-runs=$2"; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        *) usage ;;
      esac
    done
    if [ "$which" = all ]; then selected=("${targets[@]}"); else check_target "$which"; selected=("$which"); fi
    build_targets
    [ -d "$build/seeds" ] || seeds
    failed=0
    for t in "${selected[@]}"; do run_target "$t" "$limit" "${extra[@]}" || failed=1; done
    exit "$failed"
    ;;
  replay)
    selected=("$@")
    [ ${#selected[@]} -gt 0 ] || selected=("${targets[@]}")
    for t in "${selected[@]}"; do check_target "$t"; done
    build_targets
    [ -d "$build/seeds" ] || seeds
    mkdir -p "$build/logs"
    failed=0
    for t in "${selected[@]}"; do
      # -runs=0 with directories: every input once, no mutation.
      # shellcheck disable=SC2046
      if (cd "$build" && "$build/tests/fuzz/$t" -runs=0 $(inputs_of "$t")) > "$build/logs/$t-replay.log" 2>&1; then
        echo "$t: replayed $(grep -ho 'INITED.*\|Done [0-9]* runs' "$build/logs/$t-replay.log" | tail -1)"
      else
        echo "$t: replay failed; log $build/logs/$t-replay.log"
        failed=1
      fi
    done
    exit "$failed"
    ;;
  *) usage ;;
esac
