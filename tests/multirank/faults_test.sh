#!/usr/bin/env bash
# Faults of real processes in a DDP job (issue 17, "Faults, end to end"), one case per run (the first argument):
#   kill       kill -9 one of 4 ranks mid-step: the job ends within 30 s naming the rank and its signal.
#   stop       SIGSTOP one of 4 ranks: the watchdog ends the job within --timeout (plus the launcher's grace
#              period) naming the collective, the step and the silent rank.
#   no-node    node 0 of 2 alone: the rendezvous names the missing ranks and the address they should reach; node 1
#              alone names the address it could not reach.
# Every case ends with no strata process of the job left (pgrep on the job's unique run directory).
set -euo pipefail
case_name=$1
strata=$2
port=$3
work=$(mktemp -d)
victim=""
cleanup() {
  # A stopped rank must be woken or killed, or it outlives the test.
  if [ -n "$victim" ]; then kill -CONT "$victim" 2> /dev/null || true; fi
  for pid in $(pgrep -f -- "$work/" || true); do kill -KILL "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# wait_for_line, wait_for_none, rank_pid
source "$(dirname "$0")/../support/processes.sh"
# A DDP run that lasts until it is stopped; 4 steps per epoch, so "epoch N:" lines show it is training.
forever=(--data synthetic --synthetic-samples 256 --batch-size 16 --seed 1 --max-steps 100000000 --log-every 1000000
         --strategy ddp --threads 1 --master-port "$port")

# Fails unless the job's stderr (FILE) matches PATTERN.
expect() {
  local file=$1 pattern=$2
  grep -Eq -- "$pattern" "$file" || { echo "expected '$pattern' in the job's output:"; cat "$file"; exit 1; }
}

case $case_name in
kill)
  run="$work/kill"
  "$strata" train "${forever[@]}" --nproc 4 --timeout 120 --out "$run" > "$work/out" 2> "$work/err" &
  launcher=$!
  wait_for_line "$work/out" '^\[rank 0\] epoch 1:'
  victim=$(rank_pid "$run" 2)
  start=$(date +%s.%N)
  kill -KILL "$victim"
  status=0
  timeout 60 tail --pid "$launcher" -f /dev/null || { echo "the launcher did not end within 60 s"; exit 1; }
  wait "$launcher" || status=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  victim=""
  echo "kill -9 of rank 2: the job ended in ${elapsed}s with status $status"
  [ "$status" -ne 0 ] || { echo "the job succeeded although rank 2 was killed"; exit 1; }
  (( $(echo "$elapsed < 30" | bc) )) || { echo "the job took ${elapsed}s to end (limit 30 s)"; exit 1; }
  expect "$work/err" '^error: rank 2 was killed by signal 9 \(SIGKILL\); stopped the other ranks'
  wait_for_none "$run"
  ;;
stop)
  run="$work/stop"
  timeout_s=6
  "$strata" train "${forever[@]}" --nproc 4 --timeout "$timeout_s" --out "$run" > "$work/out" 2> "$work/err" &
  launcher=$!
  wait_for_line "$work/out" '^\[rank 0\] epoch 1:'
  victim=$(rank_pid "$run" 2)
  start=$(date +%s.%N)
  kill -STOP "$victim"
  status=0
  timeout 90 tail --pid "$launcher" -f /dev/null || { echo "the launcher did not end within 90 s"; exit 1; }
  wait "$launcher" || status=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  echo "SIGSTOP of rank 2: the job ended in ${elapsed}s with status $status (--timeout $timeout_s)"
  [ "$status" -ne 0 ] || { echo "the job succeeded although rank 2 was stopped"; exit 1; }
  # The timeout, the heartbeat window (3 x timeout/20) and the launcher's grace period for the stopped rank (5 s,
  # then SIGKILL: a stopped process cannot act on SIGTERM).
  limit=$(echo "$timeout_s + 0.15 * $timeout_s + 5 + 3" | bc)
  (( $(echo "$elapsed < $limit" | bc) )) || { echo "the job took ${elapsed}s to end (limit ${limit}s)"; exit 1; }
  # A rank's watchdog names the collective, its sequence number, the step and the silent rank: stopped inside a
  # collective it joined, its heartbeat names it; stopped between two, the arrival records do (and, when another
  # rank is behind too, waiting on it in the previous collective, the heartbeats say which is silent). Stopped while
  # rank 0 collects a log point's or an evaluation's figures, rank 0 names the ranks whose figures are missing (one
  # of them may itself be waiting for rank 2) and, from the heartbeats, rank 2 as the silent one.
  expect "$work/err" \
    "allReduce #[0-9]+ \\([^)]*\\) at step [0-9]+ .*(rank 2 of 4 is silent \\(no heartbeat|rank 2 of 4 did not join)|did not write 'trainer/[a-z]+/[0-9]+/<rank>' .*; rank 2 of 4 is silent \\(no heartbeat"
  expect "$work/err" '^error: rank [0-9] exited with status 1; stopped the other ranks'
  victim=""
  wait_for_none "$run"
  ;;
no-node)
  # Node 0 of 2 waits for ranks 2 and 3, which never come.
  run="$work/node0"
  start=$(date +%s)
  if timeout 60 "$strata" train "${forever[@]}" --nproc 2 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 \
      --timeout 3 --out "$run" > "$work/out" 2> "$work/err"; then
    echo "node 0 trained without node 1"; exit 1
  fi
  echo "node 0 alone: failed after $(($(date +%s) - start))s"
  expect "$work/err" "rendezvous at 127\.0\.0\.1:$port timed out after 3 s: ranks 2, 3 of 4 never arrived"
  expect "$work/err" '^error: rank [01] exited with status 1'
  wait_for_none "$run"
  # Node 1 of 2 finds no store at the master's address.
  run="$work/node1"
  if timeout 60 "$strata" train "${forever[@]}" --nproc 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 \
      --timeout 3 --out "$run" > "$work/out" 2> "$work/err"; then
    echo "node 1 trained without node 0"; exit 1
  fi
  expect "$work/err" "could not connect to the store at 127\.0\.0\.1:$port within 3 s"
  wait_for_none "$run"
  ;;
*)
  echo "unknown case $case_name (kill, stop or no-node)"; exit 2
  ;;
esac
echo "faults $case_name: passed"
