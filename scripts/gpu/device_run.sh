#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool, with .gpu-pack carried; see pack.sh). Unpacks the build,
# points the loader at the packed libraries and at cuDNN/cuBLAS/NCCL inside PyTorch's nvidia-* packages, then runs
#   tests   the gpu-labelled tests: CUDA device tests, every gradient rule on the GPU vs the CPU backend, the ONNX
#           node suite on the GPU, a 2-rank DDP run sharing the GPU through Gloo, and the five paper models'
#           training step against PyTorch on the GPU, bf16/fp16 mixed precision against PyTorch autocast
#   bench   bench/gpu_train_throughput.py (Strata vs PyTorch eager, same GPU, one run), then once more with
#           --cuda-graph auto on ResNet-50 at 32x32, and bf16 with --channels-last off (NCHW on both sides)
#   all     both.  Results land in $OUT (the device tool brings them back).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
OUT=${OUT:-/tmp/strata-out}
logs=/tmp/strata-logs  # the device tool returns at most 8 files: logs travel back as one archive
mkdir -p "$OUT" "$logs"
pack=/tmp/strata-gpu
rm -rf "$pack" && mkdir -p "$pack" && xz -dc .gpu-pack/strata-gpu.tar.xz | tar -C "$pack" -xf - || exit 1
nvidia_libs=$(python3 - <<'PY'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
dirs = sorted({os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "**", "lib*.so*"), recursive=True)})
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="$pack/lib:$nvidia_libs:${LD_LIBRARY_PATH:-}"
export STRATA_PLUGIN_PATH="$pack/plugins"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
"$pack/bin/strata" run "$pack/models/default_cnn.onnx" --device cuda --repeat 3 || echo "FAILED: strata run on cuda"
status=0
run() {  # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@" > "$logs/$name.log" 2>&1; then echo "ok"; else echo "FAILED (see $name.log)"; status=1; fi
  tail -n 15 "$logs/$name.log"
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  export STRATA_TEST_DEVICE=cuda
  run unit_gpu "$pack/bin/strata_unit_tests" --gtest_filter='*GradientsTest.*:CudaDevice*:CudaBackend*' --gtest_brief=1
  run conformance_gpu env STRATA_ONNX_NODE_TESTS="$pack/onnx-node-tests" "$pack/bin/strata_conformance_tests"
  unset STRATA_TEST_DEVICE
  run cli_device bash tests/cli/device_test.sh "$pack/bin/strata"
  run ddp_shared_gpu python3 tests/multirank/check_ddp_equivalence.py --strata "$pack/bin/strata" \
    --work-dir /tmp/strata-ddp --nproc 2 --grad-accum 2 --device cuda
  for model in resnet50 vgg16 densenet121 convnext_tiny efficientnet_v2_s; do
    run "step_${model}_f64" python3 tests/reference/check_step.py --model "$model" --strata "$pack/bin/strata" \
      --work-dir /tmp/strata-ref --device cuda --dtype float64 --batch 16 --updates 3 --tolerance 1e-9 \
      --grad-tolerance 1e-7
    run "step_${model}_f32" python3 tests/reference/check_step.py --model "$model" --strata "$pack/bin/strata" \
      --work-dir /tmp/strata-ref --device cuda --dtype float32 --batch 16 --updates 3 --tolerance 1e-3 \
      --grad-tolerance 1e-2
  done
  for precision in bf16 fp16; do
    for model in resnet50 vgg16 convnext_tiny; do
      run "mixed_${model}_${precision}" python3 tests/reference/check_mixed_precision.py --model "$model" \
        --precision "$precision" --batch 16 --device cuda --strata "$pack/bin/strata" --work-dir /tmp/strata-ref
    done
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  run bench python3 bench/gpu_train_throughput.py --strata "$pack/bin/strata"
  # CUDA graphs where launches weigh most (small images); auto decides after 8 steps, so 10 warm-up steps.
  run bench_graph python3 bench/gpu_train_throughput.py --strata "$pack/bin/strata" --models resnet50_32 \
    --precisions tf32,bf16 --cuda-graph auto --warmup 10
  # What channels-last buys in bf16: the same models with NHWC off on both sides (the main table runs it on).
  run bench_nchw python3 bench/gpu_train_throughput.py --strata "$pack/bin/strata" \
    --models resnet50_224,vgg16_224 --precisions bf16 --channels-last off
fi
tar -C "$logs" -czf "$OUT/strata-gpu-logs.tar.gz" .
exit $status
