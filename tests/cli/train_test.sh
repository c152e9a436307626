#!/usr/bin/env bash
# strata train end to end on synthetic data: outputs, resume determinism, export, and its error paths.
set -euo pipefail
strata=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--data synthetic --synthetic-samples 256 --batch-size 32 --threads 2 --seed 3 --lr 0.05)

# An uninterrupted 2-epoch run, and a run stopped after epoch 1 and resumed: same parameters, byte for byte.
"$strata" train "${common[@]}" --epochs 2 --out "$work/full" --export "$work/full.onnx" > "$work/full.log"
"$strata" train "${common[@]}" --epochs 2 --stop-after-epoch 1 --save --out "$work/part" > /dev/null
"$strata" train "${common[@]}" --epochs 2 --resume "$work/part" --export "$work/resumed.onnx" > "$work/resumed.log"
grep -q "resumed from" "$work/resumed.log"
cmp "$work/full.onnx" "$work/resumed.onnx" || { echo "resumed parameters differ from the uninterrupted run"; exit 1; }

# The run outputs: metrics per logged step and per epoch, and a summary with the architecture's fields.
test "$(grep -c '"type":"epoch"' "$work/full/metrics.jsonl")" -eq 2
for field in model strategy world_size device epochs steps global_batch_size train_time_s samples_per_s \
             final_train_loss test_accuracy params ranks peak_memory_bytes memory_breakdown compute_s \
             communication_s gpu_utilization_mean; do
  grep -q "\"$field\"" "$work/full/summary.json" || { echo "summary.json lacks $field"; exit 1; }
done

# The exported model passes ONNX's checker and runs.
/usr/bin/python3 -c "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]))" "$work/full.onnx"
"$strata" run "$work/full.onnx" --input-shape 4,1,28,28 > /dev/null

# Mean squared error on one-hot targets.
"$strata" train "${common[@]}" --max-steps 3 --loss mse --out "$work/mse" > /dev/null
grep -q '"final_train_loss"' "$work/mse/summary.json"

# Channels-last (the CPU's default for float32 models, its weights stored KRSC) trains like off, and exports the
# model's own [K, C, R, S] weights: the same ones, to rounding.
for layout in off auto; do
  "$strata" train "${common[@]}" --max-steps 4 --channels-last "$layout" --out "$work/layout-$layout" \
    --export "$work/layout-$layout.onnx" > /dev/null
done
python3 - "$work/layout-off/summary.json" "$work/layout-auto/summary.json" <<'PY'
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:])
assert not off["channels_last"]["enabled"] and on["channels_last"]["enabled"], (off["channels_last"], on["channels_last"])
assert on["channels_last"]["layout_nodes"] > 0 and on["channels_last"]["stored_weights"] == 2, on["channels_last"]
assert on["channels_last"]["transposes"] <= 2, on["channels_last"]  # the input's and the flatten's, no weight's
a, b = off["final_train_loss"], on["final_train_loss"]
assert abs(a - b) <= 1e-4 * abs(a), f"channels-last final loss {b} vs channels-first {a}"
PY
/usr/bin/python3 - "$work/layout-off.onnx" "$work/layout-auto.onnx" <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
off, on = ({t.name: numpy_helper.to_array(t) for t in onnx.load(p).graph.initializer} for p in sys.argv[1:])
assert off.keys() == on.keys()
for name, want in off.items():
    got = on[name]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6), name
PY
# A checkpoint holds the weights as the plan stores them: a resume with the other layout is refused, saying why.
if "$strata" train "${common[@]}" --epochs 2 --resume "$work/part" --channels-last off 2> "$work/err.log"; then exit 1; fi
grep -q "the checkpoint stores 2 convolution weight(s) channels-last.*resume with the layout of the run" \
  "$work/err.log" || { cat "$work/err.log"; exit 1; }

# Mixed precision (emulated on the CPU): bf16 learns like fp32; fp16 reports its loss scaling. A fixed scale of
# 1e30 overflows float16 on every step, so every step is skipped.
"$strata" train "${common[@]}" --epochs 1 --precision bf16 --out "$work/bf16" > /dev/null
python3 - "$work/full/metrics.jsonl" "$work/bf16/metrics.jsonl" <<'PY'
import json, sys
def first_epoch_loss(path):
    return next(json.loads(l)["train_loss"] for l in open(path) if '"type":"epoch"' in l)
fp32, bf16 = first_epoch_loss(sys.argv[1]), first_epoch_loss(sys.argv[2])
assert abs(bf16 - fp32) < 0.05 * fp32, f"bf16 epoch loss {bf16} vs fp32 {fp32}"
PY
grep -q '"precision": "bf16"' "$work/bf16/summary.json"
"$strata" train "${common[@]}" --max-steps 4 --precision fp16 --out "$work/fp16" > /dev/null
grep -q '"loss_scale_final"' "$work/fp16/summary.json"
grep -q '"skipped_steps"' "$work/fp16/summary.json"
# fp16 stopped after epoch 1 and resumed: the checkpoint keeps the loss scale, so the weights match byte for byte.
# Starting at 1e9 the scale overflows and backs off through epoch 1 (11 of 16 steps skipped); a resume that
# restarted the scale would skip different steps.
fp16=(--epochs 2 --precision fp16 --loss-scale dynamic:1e9)
"$strata" train "${common[@]}" "${fp16[@]}" --out "$work/fp16full" --export "$work/fp16full.onnx" > /dev/null
"$strata" train "${common[@]}" "${fp16[@]}" --stop-after-epoch 1 --save --out "$work/fp16part" > /dev/null
grep -q '"loss_scale"' "$work/fp16part/checkpoint/state.json"
"$strata" train "${common[@]}" "${fp16[@]}" --resume "$work/fp16part" --export "$work/fp16res.onnx" > /dev/null
cmp "$work/fp16full.onnx" "$work/fp16res.onnx" || { echo "resumed fp16 parameters differ"; exit 1; }
"$strata" train "${common[@]}" --max-steps 3 --precision fp16 --loss-scale 1e30 --out "$work/overflow" > /dev/null
grep -q '"skipped_steps": 3' "$work/overflow/summary.json"

# A damaged checkpoint: the error names the file (and the tensor), never a crash or silently wrong weights.
cp -r "$work/part" "$work/garbled"
echo "not json" > "$work/garbled/checkpoint/rank0/manifest.json"
if "$strata" train "${common[@]}" --epochs 2 --resume "$work/garbled" 2> "$work/err.log"; then exit 1; fi
grep -q "rank0/manifest.json: corrupt checkpoint manifest" "$work/err.log" || { cat "$work/err.log"; exit 1; }
cp -r "$work/part" "$work/swapped"
cp "$work/swapped/checkpoint/rank0/t1.pb" "$work/swapped/checkpoint/rank0/t0.pb"
if "$strata" train "${common[@]}" --epochs 2 --resume "$work/swapped" 2> "$work/err.log"; then exit 1; fi
# The manifest's size and CRC32 catch the swap before the file is parsed (Note [Checkpoint checksums]).
grep -q "t0.pb: tensor '.*' is damaged" "$work/err.log" || { cat "$work/err.log"; exit 1; }

# Errors: resuming without a checkpoint, a missing data set directory.
if "$strata" train "${common[@]}" --resume "$work/full" 2> "$work/err.log"; then exit 1; fi
grep -q "no checkpoint to resume from" "$work/err.log"
if "$strata" train --data mnist:/nonexistent --max-steps 1 2> "$work/err.log"; then exit 1; fi
grep -q "/nonexistent" "$work/err.log"
echo "train end-to-end checks passed"
