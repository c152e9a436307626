#!/usr/bin/env bash
# `strata compare` end to end (issue 16): 2 strategies x 2 world sizes on the bundled CNN, one configuration killed
# while it runs. Checks that the comparison goes on past it and reports why it failed, that --resume reruns only
# that one, that the report files exist, that every figure equals its run's summary.json (check_compare.py), and
# that report.html renders in a headless browser.
set -euo pipefail
strata=$1
python=$2
port=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cleanup() {
  for pid in $(pgrep -f -- "$work/" || true); do kill -KILL "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
source "$here/../support/processes.sh"
out="$work/cmp"
victim="$out/runs/default_cnn-ddp-n2"

# A few hundred steps per configuration: 2048 samples in batches of 16 (128 steps on one rank, 64 on two per epoch).
"$strata" compare --strategy ddp --strategy "fsdp shard=full" --world-size 1 --world-size 2 --out "$out" \
  --master-port "$port" -- --data synthetic --synthetic-samples 2048 --batch-size 16 --epochs 2 --log-every 8 \
  --threads 1 --sample-every 0.2 > "$work/first.out" 2>&1 &
compare=$!
# Kill the second configuration (ddp on 2 ranks) once it trains: every process of its run.
wait_for_line "$work/first.out" '^\[2/4\] default_cnn-ddp-n2'
wait_for_line "$victim/train.log" 'epoch 1 step|\[rank 0\] epoch'
for pid in $(pgrep -f -- "--out $victim" || true); do kill -KILL "$pid" 2> /dev/null || true; done
status=0
wait "$compare" || status=$?
cat "$work/first.out"
[ "$status" -ne 0 ] || { echo "strata compare succeeded although a configuration was killed"; exit 1; }
grep -q "FAILED after .*: strata train was killed by signal 9" "$work/first.out" ||
  { echo "the killed configuration's reason is missing"; exit 1; }
grep -q '^\[4/4\] default_cnn-fsdp-shard-full-n2' "$work/first.out" ||
  { echo "the comparison stopped at the killed configuration"; exit 1; }
grep -q "killed by signal 9" "$out/report.md" || { echo "report.md does not show the failure"; exit 1; }
"$python" "$here/check_compare.py" "$out" --expect-failed default_cnn-ddp-n2

# --resume reruns the failed configuration only.
before=$(stat -c %Y "$out/runs/default_cnn-ddp-n1/summary.json")
"$strata" compare --resume "$out" --master-port "$port" > "$work/resume.out" 2>&1 ||
  { cat "$work/resume.out"; echo "strata compare --resume failed"; exit 1; }
cat "$work/resume.out"
grep -q "resuming: 3 of 4 configurations already done" "$work/resume.out"
[ "$(stat -c %Y "$out/runs/default_cnn-ddp-n1/summary.json")" = "$before" ] ||
  { echo "--resume reran a finished configuration"; exit 1; }
"$python" "$here/check_compare.py" "$out"

# The HTML renders offline in a headless browser, and the screenshot is not blank.
command -v chromium > /dev/null || { echo "chromium is missing (scripts/install-deps.sh installs it)"; exit 1; }
timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$work/chromium" \
  --window-size=1300,2400 --screenshot="$work/report.png" "file://$out/report.html" > "$work/chromium.log" 2>&1 ||
  { cat "$work/chromium.log"; echo "chromium could not render report.html"; exit 1; }
"$python" "$here/check_compare.py" "$out" --screenshot "$work/report.png"
wait_for_none "$work/"
echo "compare: passed"
