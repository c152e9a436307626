#!/usr/bin/env bash
# Strategy roles (issue 13): processes a strategy declares, started by the launcher beside the workers and found
# through the rendezvous store. Uses the test plugin echo_role (tests/plugins/echo_role): its echo-server processes
# publish "host:port"; every rank's setup() looks each one up, connects and checks the echo.
# Usage: roles_test.sh STRATA_BINARY ECHO_ROLE_PLUGIN_DIR
set -euo pipefail
strata=$1
plugin_dir=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# wait_for_line, wait_for_none
source "$(dirname "$0")/../support/processes.sh"
# The plugin directory under $work: it appears on every rank's and role's command line (--plugin-dir), so
# `pgrep -f $work` finds whatever this test left running.
ln -s "$(cd "$plugin_dir" && pwd)" "$work/plugins"
echo_role=(--strategy echo_role --plugin-dir "$work/plugins")
common=(--data synthetic --synthetic-samples 64 --batch-size 16 --seed 1)
# A port per job, away from the default 29500 other tests use.
port() { echo $((20000 + RANDOM % 20000)); }

# (a) Two workers, two echo-servers: every rank reaches both servers at the endpoints they published; the servers
# are asked to stop once the workers are done, and nothing is left running.
timeout 300 "$strata" train "${common[@]}" "${echo_role[@]}" --strategy-opt servers=2 --max-steps 2 --nproc 2 \
  --master-port "$(port)" --out "$work/ok" > "$work/ok.out" 2> "$work/ok.err" \
  || { echo "the job with two echo-servers failed"; cat "$work/ok.out" "$work/ok.err"; exit 1; }
for r in 0 1; do
  for i in 0 1; do
    grep -Eq "^\[rank $r\] rank $r reached echo-server $i at [^ ]+:[0-9]+$" "$work/ok.out" \
      || { echo "rank $r did not reach echo-server $i"; cat "$work/ok.out" "$work/ok.err"; exit 1; }
  done
done
for i in 0 1; do
  grep -Eq "^\[echo-server $i\] echo-server $i of 2 listening at " "$work/ok.out" \
    || { echo "echo-server $i did not start"; cat "$work/ok.out"; exit 1; }
  grep -q "^\[echo-server $i\] echo-server $i stopping" "$work/ok.out" \
    || { echo "echo-server $i was not asked to stop"; cat "$work/ok.out"; exit 1; }
done
if grep -v -E '^\[(rank [01]|echo-server [01])\] ' "$work/ok.out" "$work/ok.err"; then
  echo "unprefixed output lines"; exit 1
fi
wait_for_none "$work"

# (b) echo-server 1 fails at once (fail_role=1): the launcher ends the job, naming the role and index, long before
# the ranks' --timeout would, and stops the ranks and the other server.
start=$(date +%s)
if timeout 120 "$strata" train "${common[@]}" "${echo_role[@]}" --strategy-opt servers=2 --strategy-opt fail_role=1 \
    --max-steps 100000000 --nproc 2 --timeout 100 --master-port "$(port)" --out "$work/fail" \
    > "$work/fail.out" 2> "$work/fail.err"; then
  echo "the job succeeded although echo-server 1 failed"; exit 1
fi
elapsed=$(($(date +%s) - start))
[ "$elapsed" -lt 30 ] || { echo "stopping the job after the role failed took ${elapsed}s"; exit 1; }
grep -q "role echo-server 1 exited with status 1 before the workers finished; stopped the ranks and the other roles" \
  "$work/fail.err" || { echo "the role failure message is missing"; cat "$work/fail.err"; exit 1; }
grep -q "^\[echo-server 1\] .*role echo-server 1: .*fails as asked" "$work/fail.err" \
  || { echo "the role's own error is missing"; cat "$work/fail.err"; exit 1; }
wait_for_none "$work"

# (c) `strata role` refuses a role its strategy does not declare, listing the ones it does.
if "$strata" role echo-server --workers 2 --strategy single > /dev/null 2> "$work/none.err"; then exit 1; fi
grep -q "role echo-server 0: strategy 'single' declares no role 'echo-server' (it declares no roles)" \
  "$work/none.err" || { cat "$work/none.err"; exit 1; }
if "$strata" role echo-serv --workers 2 "${echo_role[@]}" > /dev/null 2> "$work/typo.err"; then exit 1; fi
grep -q "declares no role 'echo-serv'; its roles are echo-server (x1)" "$work/typo.err" \
  || { cat "$work/typo.err"; exit 1; }

# (d) Launching is not ours (as under srun): the ranks get RANK/WORLD_SIZE from outside and the role is started by
# hand with the documented command; it is found through the store, and stops cleanly on SIGTERM.
p=$(port)
MASTER_PORT=$p "$strata" role echo-server --index 0 --count 1 --workers 2 "${echo_role[@]}" > "$work/hand-role.out" 2>&1 &
role=$!
pids+=("$role")
ranks=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_PORT=$p timeout 300 "$strata" train "${common[@]}" "${echo_role[@]}" --max-steps 2 \
    --out "$work/hand" > "$work/hand-rank$r.out" 2>&1 &
  ranks+=("$!")
  pids+=("$!")
done
for r in 0 1; do
  wait "${ranks[r]}" || { echo "hand-started rank $r failed"; cat "$work"/hand-*.out; exit 1; }
  grep -Eq "^rank [01] reached echo-server 0 at " "$work/hand-rank$r.out" || { cat "$work/hand-rank$r.out"; exit 1; }
done
kill -TERM "$role"
wait "$role" || { echo "the hand-started role did not stop cleanly on SIGTERM"; cat "$work/hand-role.out"; exit 1; }
grep -q "^echo-server 0 stopping" "$work/hand-role.out" || { cat "$work/hand-role.out"; exit 1; }

# (e) A launcher killed outright: PR_SET_PDEATHSIG ends its ranks and its roles alike.
"$strata" train "${common[@]}" "${echo_role[@]}" --strategy-opt servers=2 --max-steps 100000000 --log-every 1000000 \
  --nproc 2 --master-port "$(port)" --out "$work/kill" > "$work/kill.out" 2>&1 &
launcher=$!
pids+=("$launcher")
wait_for_line "$work/kill.out" '^\[rank 1\] rank 1 reached echo-server 1 '
kill -KILL "$launcher"
{ wait "$launcher"; } 2> /dev/null || true
wait_for_none "$work"

echo "role checks passed"
