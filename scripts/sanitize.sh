#!/usr/bin/env bash
# Builds Strata with sanitizers into its own build folder and runs tests under them (docs/sanitizers.md).
#
#   scripts/sanitize.sh asan [ctest args]   ASan + UBSan (+ LeakSanitizer) build in build-asan/. Without ctest
#                                           args: the unit tests (label unit, which includes the emulated_device.*
#                                           tests and the cli.* tests of the strata binary) and the multirank tests
#                                           (label multirank: the launcher, DDP equivalence, strategy roles). With
#                                           ctest args, those select the tests instead (CI: `-L unit`). Then, in
#                                           every case, a leak check of a short training run: the bundled CNN, 2 DDP
#                                           ranks, 50 steps on synthetic data; every process's report is checked.
#   scripts/sanitize.sh tsan [ctest args]   TSan build in build-tsan/. Without ctest args: the tests of the code that
#                                           runs threads (the list in tsan_tests below): process groups (Gloo, the
#                                           checked and staging wrappers, their watchdogs), the stores (in-memory,
#                                           TCP), the DataLoader's prefetch thread, and the launcher, role and DDP
#                                           tests of the strata binary (several processes; DDP's gradient hooks
#                                           fire from the backward pass while Gloo's thread all-reduces).
#
# A sanitizer report fails the test it happens in: ASan and UBSan end the process with exit code 1 at the first
# report (halt_on_error; the build uses -fno-sanitize-recover=undefined), LeakSanitizer exits with 23 at exit, TSan
# exits with 66 at exit. The options are exported, so they reach every child process: the ranks and roles the
# launcher starts, and the strata runs of the Python and shell test drivers.
# Environment: SANITIZE_BUILD_DIR overrides the build folder; SANITIZE_SKIP_DEPS=1 skips install-deps.sh;
# SANITIZE_OPT sets the optimisation level (-O0 unless set).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case "$mode" in
  asan) cmake_sanitize=address ;;
  tsan) cmake_sanitize=thread ;;
  *) echo "usage: $0 asan|tsan [ctest args]" >&2; exit 2 ;;
esac
shift
build_dir=${SANITIZE_BUILD_DIR:-$root/build-$mode}
supp=$root/scripts/sanitizers

[ "${SANITIZE_SKIP_DEPS:-0}" = 1 ] || bash "$root/scripts/install-deps.sh"

# g++ (Debian 12's 12.2) with its own sanitizer runtimes; ccache only where it is installed.
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# CUDA off: nvcc does not build with the sanitizer runtimes, and there is no GPU to run on anyway.
# Bench off: no test runs the benchmarks. RelWithDebInfo at -O0 (SANITIZE_OPT overrides): line numbers, every access
# instrumented as written, and the quickest build. 2026-11-28, a Zen 4 host, 2 cores: the ASan+UBSan build 430 s and
# its 814 unit tests 202 s at -O0, against 690 s and 145-193 s at -O1 (elementwise_binary.cpp: 105 s at -O3, 49 s at
# -O1; reduction_ops.cpp 31 s at -O1, 15 s at -O0).
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${SANITIZE_OPT:--O0} -DNDEBUG" \
  -DSTRATA_CUDA=OFF -DSTRATA_SANITIZE="$cmake_sanitize" -DSTRATA_BUILD_BENCH=OFF "${launcher[@]}" > /dev/null
cmake --build "$build_dir" --parallel "$(nproc)"

# Options common to every process of the run. log_path is not set: reports go to stderr, where ctest's
# --output-on-failure and the launcher's [rank N] prefixes show them.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:exitcode=1:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:detect_odr_violation=2:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="exitcode=23:suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=0:exitcode=66:second_deadlock_stack=1:history_size=4:suppressions=$supp/tsan.supp"

cd "$build_dir"
status=0
if [ "$mode" = asan ]; then
  if [ $# -eq 0 ]; then set -- -L 'unit|multirank'; fi
  # One test at a time unless the arguments say otherwise (scripts/test.sh runs the unit tests two at a time).
  ctest --output-on-failure --timeout 1800 "$@" || status=$?

  # Item: a short DDP training run leaks nothing. Every process (the launcher and both ranks) writes its sanitizer
  # output to its own file (log_path), and atexit=1 makes each one write its exit statistics there, so a file per
  # process proves that each process reached the leak check at exit; any ERROR in them fails the run.
  echo "== LeakSanitizer: strata train --nproc 2 --strategy ddp --max-steps 50 (bundled CNN, synthetic data)"
  leak_dir=$build_dir/sanitize-leak-run
  rm -rf "$leak_dir"; mkdir -p "$leak_dir"
  train_status=0
  start=$(date +%s)
  ASAN_OPTIONS="$ASAN_OPTIONS:atexit=1:log_path=$leak_dir/asan" \
    "$build_dir/cli/strata" train --nproc 2 --strategy ddp --max-steps 50 --data synthetic \
    --synthetic-samples 1024 --batch-size 32 --seed 1 --log-every 10 --out "$leak_dir/run" \
    > "$leak_dir/train.log" 2>&1 || train_status=$?
  echo "   $(($(date +%s) - start)) s, exit status $train_status"
  reports=("$leak_dir"/asan.*)
  if [ "$train_status" -ne 0 ] || [ ! -e "${reports[0]}" ] || grep -lq "ERROR:" "${reports[@]}"; then
    echo "   FAILED: the training run or its leak check"
    cat "$leak_dir/train.log"
    for r in "${reports[@]}"; do [ -e "$r" ] && { echo "-- $r"; cat "$r"; }; done
    status=1
  elif [ "${#reports[@]}" -ne 3 ]; then
    echo "   FAILED: expected the reports of 3 processes (the launcher and 2 ranks), found ${#reports[@]}"
    status=1
  else
    echo "   no leaks and no errors in the launcher and both ranks (${#reports[@]} processes checked)"
  fi
else
  # OpenMP: Debian's libgomp is not built with TSan, so TSan does not see its fork/join barriers and reports the
  # memory a parallelFor or oneDNN worker writes and the caller reads after the join as races (false positives).
  # OMP_THREAD_LIMIT=1 would hide them but hangs oneDNN's backward convolution (it waits for the team it asked
  # for), and the unit tests size the team from the core count. So the TSan set is the tests whose threads are not
  # OpenMP's: the process groups, stores and DataLoader suites (their tensors are below every parallel grain), and
  # the strata binary's multi-process tests with STRATA_THREADS=1 (each rank's team is one thread): the launcher,
  # roles, and DDP equivalence, where DDP's gradient-ready hooks fire from the backward pass while Gloo's worker
  # thread all-reduces (the executor hook path).
  export STRATA_THREADS=1
  if [ $# -eq 0 ]; then
    tsan_tests='^(CheckedProcessGroupTest|Gloo[A-Za-z]*Test|StagingProcessGroupTest|InMemoryStoreTest|TcpStoreTest'
    tsan_tests+='|DataLoaderTest)\.|^cli\.launcher$|^multirank\.(roles|ddp_equivalence\.nproc)'
    set -- -R "$tsan_tests"
  fi
  ctest --output-on-failure --timeout 1800 "$@" || status=$?
fi
exit $status
