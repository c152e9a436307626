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

# Errors: resuming without a checkpoint, a missing data set directory.
if "$strata" train "${common[@]}" --resume "$work/full" 2> "$work/err.log"; then exit 1; fi
grep -q "no checkpoint to resume from" "$work/err.log"
if "$strata" train --data mnist:/nonexistent --max-steps 1 2> "$work/err.log"; then exit 1; fi
grep -q "/nonexistent" "$work/err.log"
echo "train end-to-end checks passed"
