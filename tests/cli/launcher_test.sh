#!/usr/bin/env bash
# strata train --nproc: the local rank launcher (cli/launch/launcher.cpp). Output prefixes, per-rank run directories,
# a failing rank stopping the others, signals reaching the ranks, no orphans, and malformed rank environments.
set -euo pipefail
strata=$1
port=${2:-29500}  # the store's, for every job here (they run one at a time)
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# wait_for_none
source "$(dirname "$0")/../support/processes.sh"
common=(--data synthetic --synthetic-samples 64 --batch-size 16 --seed 1 --master-port "$port")
# A run that lasts until it is stopped.
forever=(--data synthetic --synthetic-samples 64 --batch-size 16 --max-steps 100000000 --log-every 1000000
  --master-port "$port")

# Polls until FILE holds COUNT "[rank R] rank R of N: ... set up" lines (or fails after 60 s): the ranks are
# running strata train itself, past fork, exec and the rendezvous.
wait_for_ranks() {
  local file=$1 count=$2
  for _ in $(seq 600); do
    [ "$(grep -Ec '^\[rank [0-9]+\] rank [0-9]+ of [0-9]+: ' "$file" || true)" -ge "$count" ] && return 0
    sleep 0.1
  done
  echo "expected $count ranks to start training"; cat "$file"; exit 1
}
# (a) Two ranks train; every line carries its rank; rank 0 writes RUN_DIR with both ranks' figures.
timeout 300 "$strata" train "${common[@]}" --max-steps 2 --nproc 2 --out "$work/ok" > "$work/ok.out" 2> "$work/ok.err"
grep -q '^\[rank 0\] ' "$work/ok.out" || { echo "no [rank 0] lines"; cat "$work/ok.out"; exit 1; }
grep -q '^\[rank 1\] ' "$work/ok.out" || { echo "no [rank 1] lines"; cat "$work/ok.out"; exit 1; }
if grep -v '^\[rank [01]\] ' "$work/ok.out" "$work/ok.err"; then echo "unprefixed output lines"; exit 1; fi
grep -q '"world_size": 2' "$work/ok/summary.json" || { echo "summary.json lacks world_size 2"; exit 1; }
grep -q '"rank": 1' "$work/ok/summary.json" || { echo "summary.json lacks rank 1's figures"; exit 1; }

# (b) Rank 1 of 3 fails at once (test hook): the launcher stops ranks 0 and 2 quickly and says which rank failed.
marker="$work/fail-marker"
start=$(date +%s)
if STRATA_TEST_EXIT_RANK=1 timeout 60 "$strata" train "${forever[@]}" --nproc 3 --out "$marker" \
    > "$work/fail.out" 2> "$work/fail.err"; then
  echo "the job succeeded although rank 1 failed"; exit 1
fi
elapsed=$(($(date +%s) - start))
[ "$elapsed" -lt 10 ] || { echo "stopping the ranks took ${elapsed}s"; exit 1; }
grep -q "rank 1 exited with status 3; stopped the other ranks" "$work/fail.err" \
  || { echo "the failure message is missing"; cat "$work/fail.err"; exit 1; }
grep -q '^\[rank 1\] test hook STRATA_TEST_EXIT_RANK' "$work/fail.out"
if pgrep -fa -- "$marker"; then echo "ranks outlived the launcher"; exit 1; fi

# (b2) A misspelt flag is refused once by the launcher, before any rank starts (not once per rank after the
# rendezvous).
for flag in "--channels-last nhwc" "--precision fp8" "--cuda-graph maybe" "--device tpu" "--strategy-opt x"; do
  # shellcheck disable=SC2086  # the flag and its value are two words
  if timeout 60 "$strata" train "${common[@]}" --nproc 2 --out "$work/flag" $flag > "$work/flag.out" 2> "$work/flag.err"
  then echo "the job succeeded with $flag"; exit 1; fi
  if grep -q '^\[rank ' "$work/flag.out" "$work/flag.err"; then echo "ranks started with $flag"; cat "$work/flag.out"; exit 1; fi
  [ "$(grep -c -- "${flag%% *} " "$work/flag.err")" -eq 1 ] || { echo "expected one error for $flag"; cat "$work/flag.err"; exit 1; }
done

# (c) Malformed rank environments name the variable and its value.
if RANK=x WORLD_SIZE=2 "$strata" train "${common[@]}" --max-steps 1 --out "$work/bad" 2> "$work/bad.err"; then exit 1; fi
grep -q "environment variable RANK='x' is not a non-negative integer" "$work/bad.err" || { cat "$work/bad.err"; exit 1; }
if RANK=0 WORLD_SIZE=2 MASTER_PORT=99999 "$strata" train "${common[@]}" --max-steps 1 2> "$work/bad.err"; then exit 1; fi
grep -q "MASTER_PORT='99999'" "$work/bad.err" || { cat "$work/bad.err"; exit 1; }
if SLURM_PROCID=4 SLURM_NTASKS=2 "$strata" train "${common[@]}" --max-steps 1 2> "$work/bad.err"; then exit 1; fi
grep -q "rank 4 is not below the world size 2" "$work/bad.err" || { cat "$work/bad.err"; exit 1; }

# (d) SIGTERM to the launcher reaches the ranks; the launcher waits for them and dies by the same signal.
marker="$work/term-marker"
"$strata" train "${forever[@]}" --nproc 2 --out "$marker" > "$work/term.out" 2> "$work/term.err" &
launcher=$!
pids+=("$launcher")
wait_for_ranks "$work/term.out" 2
[ "$(pgrep -fc -- "$marker")" -eq 3 ] || { echo "expected the launcher and 2 ranks"; pgrep -fa -- "$marker"; exit 1; }
kill -TERM "$launcher"
status=0
wait "$launcher" || status=$?
[ "$status" -eq 143 ] || { echo "launcher exit status $status after SIGTERM, expected 143"; cat "$work/term.err"; exit 1; }
grep -q "interrupted by SIGTERM; stopped the ranks" "$work/term.err"
if pgrep -fa -- "$marker"; then echo "ranks outlived the launcher"; exit 1; fi

# (e) A launcher killed outright (no chance to forward anything): PR_SET_PDEATHSIG still ends the ranks.
marker="$work/kill-marker"
"$strata" train "${forever[@]}" --nproc 2 --out "$marker" > "$work/kill.out" 2>&1 &
launcher=$!
pids+=("$launcher")
wait_for_ranks "$work/kill.out" 2
kill -KILL "$launcher"
wait "$launcher" 2> /dev/null || true
wait_for_none "$marker"

# (f) Two one-node jobs at once without --master-port: each store takes a free port (Note [Standalone port] in
# cli/launch/free_port.h) instead of both asking for 29500, so the second job trains while the first is still running.
marker="$work/alone-marker"
alone=(--data synthetic --synthetic-samples 64 --batch-size 16 --nproc 2)
"$strata" train "${alone[@]}" --max-steps 100000000 --log-every 1000000 --out "$marker" > "$work/alone1.out" 2>&1 &
launcher=$!
pids+=("$launcher")
wait_for_ranks "$work/alone1.out" 2
timeout 300 "$strata" train "${alone[@]}" --seed 1 --max-steps 2 --out "$work/alone2" > "$work/alone2.out" 2>&1 \
  || { echo "a second one-node job without --master-port failed beside the first"; cat "$work/alone2.out"; exit 1; }
kill -TERM "$launcher"
wait "$launcher" 2> /dev/null || true
wait_for_none "$marker"

echo "launcher checks passed"
