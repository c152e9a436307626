#!/usr/bin/env bash
# --device end to end, on whatever machine runs it. Without a usable GPU: `--device cuda` fails with exit code 1
# (not a crash) and says why, and `--device auto` trains on the CPU. With one: a short run on cuda reports the
# device and the GPU figures in summary.json.
set -uo pipefail
strata=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$strata" run --device cuda >"$work/probe.out" 2>&1
status=$?
if [ $status -ne 0 ]; then
  [ $status -eq 1 ] || fail "--device cuda without a GPU exited with $status (a crash?)"
  grep -Eq "cannot use CUDA: .+Run with --device cpu|built without the CUDA backend" "$work/probe.out" ||
    fail "--device cuda without a GPU did not say why: $(cat "$work/probe.out")"
  "$strata" train --device auto --data synthetic --max-steps 2 --batch-size 8 --out "$work/auto" >/dev/null 2>&1 ||
    fail "--device auto did not fall back to the CPU"
  grep -q '"device": "cpu"' "$work/auto/summary.json" || fail "--device auto: summary.json does not say cpu"
  echo "no GPU here: $(grep -m1 -E "cannot use CUDA|without the CUDA backend" "$work/probe.out")"
  exit 0
fi
"$strata" train --device cuda --data synthetic --max-steps 20 --batch-size 32 --out "$work/gpu" >/dev/null 2>&1 ||
  fail "training on cuda failed"
grep -q '"device": "cuda:0' "$work/gpu/summary.json" || fail "summary.json does not name the GPU"
grep -q '"gpu_utilization_mean"' "$work/gpu/summary.json" || fail "summary.json has no GPU utilisation"
echo "trained on $(grep -o '"device": "[^"]*"' "$work/gpu/summary.json")"
# --cuda-graph on: the step recorded after two warm-up steps and replayed trains like node-by-node steps.
for graph in off on; do
  "$strata" train --device cuda --cuda-graph "$graph" --data synthetic --max-steps 12 --batch-size 32 --seed 5 \
    --lr-schedule constant --out "$work/graph-$graph" >"$work/graph-$graph.out" 2>&1 ||
    fail "training with --cuda-graph $graph failed: $(tail -n 3 "$work/graph-$graph.out")"
done
grep -q '"replayed": true' "$work/graph-on/summary.json" ||
  fail "--cuda-graph on did not replay: $(grep -A3 cuda_graph "$work/graph-on/summary.json")"
python3 - "$work/graph-off/summary.json" "$work/graph-on/summary.json" <<'PY' || fail "--cuda-graph on trained differently"
import json, sys
off, on = (json.load(open(p))["final_train_loss"] for p in sys.argv[1:])
print(f"final loss node by node {off:.6f}, replayed {on:.6f}")
sys.exit(0 if abs(off - on) <= 1e-4 * max(abs(off), 1e-6) else 1)
PY
echo "cuda graph: $(grep -o '"detail": "[^"]*"' "$work/graph-on/summary.json")"
# bf16 on CUDA runs channels-last by default (cuDNN's NHWC kernels): it trains like channels-first bf16, and it
# can be recorded.
for layout in off auto; do
  "$strata" train --device cuda --precision bf16 --channels-last "$layout" --cuda-graph on --data synthetic \
    --max-steps 12 --batch-size 32 --seed 5 --lr-schedule constant --out "$work/bf16-$layout" \
    >"$work/bf16-$layout.out" 2>&1 || fail "bf16 training with --channels-last $layout failed: $(tail -n 3 "$work/bf16-$layout.out")"
done
python3 - "$work/bf16-off/summary.json" "$work/bf16-auto/summary.json" <<'PY' || fail "channels-last bf16 trained differently"
import json, sys
off, auto = (json.load(open(p)) for p in sys.argv[1:])
print("channels-last:", auto["channels_last"], "replayed:", auto["cuda_graph"]["replayed"])
assert auto["channels_last"]["enabled"] and auto["channels_last"]["layout_nodes"] > 0
assert auto["cuda_graph"]["replayed"]
a, b = off["final_train_loss"], auto["final_train_loss"]
sys.exit(0 if abs(a - b) <= 2e-2 * max(abs(a), 1e-6) else 1)
PY
