#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool, with .gpu-pack carried; see pack.sh). Unpacks the build,
# points the loader at the packed libraries and at cuDNN/cuBLAS/NCCL inside PyTorch's nvidia-* packages, then runs
# the groups named on the command line, in order (most telling first):
#   ops      the gpu-labelled GoogleTest cases (CUDA device tests, every gradient rule and every channels-last op on
#            the GPU against the CPU backend), the ONNX node suite on the GPU, cli.device's GPU branch
#   models   a 2-rank DDP run sharing the GPU through Gloo; the five paper models' training step against PyTorch
#            on the GPU (float32, float64, channels-last)
#   mixed    bf16/fp16 mixed precision against PyTorch autocast (ResNet-50, VGG16, ConvNeXt-Tiny)
#   strategies  FSDP (full, grad_op, hybrid; 16-bit collectives, sharded accumulation, offload to the host) with
#            ranks sharing the GPU, against one process on the concatenated batch (as the multirank.*_shared_gpu
#            ctest cases), and the parameter server (sync) with its workers on the GPU
#   bench    bench/gpu_train_throughput.py (Strata vs PyTorch eager, same GPU, one run)
#   extra    the same benchmark with --cuda-graph auto (ResNet-50 at 32x32) and bf16 with --channels-last off
#   tests    = ops models mixed strategies;  all = tests bench extra
# The device tool allows 600 s a command and 30 minutes a session: the groups share a budget of
# STRATA_DEVICE_BUDGET_S seconds (default 540), each step gets what is left, steps that no longer fit are listed
# as not run, and the logs archive ($OUT/strata-gpu-logs.tar.gz) is rewritten after every step, so a command cut
# short still brings back everything it did. $OUT/summary.txt has one line per step.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ $# -gt 0 ] || set -- all
for what in "$@"; do
  case "$what" in
    ops | models | mixed | strategies | bench | extra | tests | all) ;;
    *) echo "unknown group '$what': expected ops, models, mixed, strategies, bench, extra, tests or all" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/strata-out}
budget=${STRATA_DEVICE_BUDGET_S:-540}
deadline=$((SECONDS + budget))
logs=/tmp/strata-logs  # the device tool returns at most 8 files: logs travel back as one archive
mkdir -p "$OUT" "$logs"
summary="$OUT/summary.txt"
: > "$summary"
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
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt" "$summary"
status=0
archive() { tar -C "$logs" -czf "$OUT/strata-gpu-logs.tar.gz" .; }
run() {  # name, command...: runs within what is left of the budget, records the outcome and re-archives the logs
  local name=$1; shift
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 30 ]; then
    echo "NOT RUN $name (out of time)" | tee -a "$summary"; status=1; return
  fi
  echo "=== $name (${left}s left)"
  local start=$SECONDS rc=0
  timeout -k 5 "$left" "$@" > "$logs/$name.log" 2>&1 || rc=$?
  local took=$((SECONDS - start)) outcome=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then outcome="TIMED OUT"; status=1
  elif [ "$rc" -ne 0 ]; then outcome="FAILED rc=$rc"; status=1
  elif grep -q -e "no CUDA device" -e "no GPU here" "$logs/$name.log"; then outcome="SKIPPED (no GPU)"; status=1; fi
  echo "$outcome $name ${took}s" | tee -a "$summary"
  tail -n 15 "$logs/$name.log"
  archive
}
step() {  # model, dtype, tolerance, grad tolerance, extra check_step.py arguments...
  local model=$1 dtype=$2 tolerance=$3 grad=$4 judge=peer; shift 4
  [ "$dtype" = float32 ] && judge=float64  # as tests/reference/CMakeLists.txt (Note [float32 judged by float64])
  run "step_${model}_${dtype}${1:+_cl}" python3 tests/reference/check_step.py --model "$model" --strata "$pack/bin/strata" \
    --work-dir /tmp/strata-ref --device cuda --dtype "$dtype" --batch 16 --updates 3 --tolerance "$tolerance" \
    --grad-tolerance "$grad" --judge "$judge" "$@"
}
group_ops() {
  run strata_run "$pack/bin/strata" run "$pack/models/default_cnn.onnx" --device cuda --repeat 3
  # The same filter as tests/CMakeLists.txt's gpu.* cases.
  run unit_gpu env STRATA_TEST_DEVICE=cuda "$pack/bin/strata_unit_tests" \
    --gtest_filter='*GradientsTest.*:CudaDevice*:ChannelsLastOpsTest.*:CudaBackend*' --gtest_brief=1
  run conformance_gpu env STRATA_TEST_DEVICE=cuda STRATA_ONNX_NODE_TESTS="$pack/onnx-node-tests" \
    "$pack/bin/strata_conformance_tests"
  run cli_device bash tests/cli/device_test.sh "$pack/bin/strata"
}
group_models() {
  run ddp_shared_gpu python3 tests/multirank/check_ddp_equivalence.py --strata "$pack/bin/strata" \
    --work-dir /tmp/strata-ddp --nproc 2 --grad-accum 2 --device cuda
  step resnet50 float32 1e-3 1e-2
  step resnet50 float32 1e-3 1e-2 --channels-last on
  step efficientnet_v2_s float32 1e-3 1e-2 --channels-last on
  for model in vgg16 densenet121 convnext_tiny efficientnet_v2_s; do step "$model" float32 1e-3 1e-2; done
  for model in resnet50 vgg16 densenet121 convnext_tiny efficientnet_v2_s; do step "$model" float64 1e-9 1e-7; done
}
group_mixed() {
  for precision in bf16 fp16; do
    for model in resnet50 vgg16 convnext_tiny; do
      run "mixed_${model}_${precision}" python3 tests/reference/check_mixed_precision.py --model "$model" \
        --precision "$precision" --batch 16 --device cuda --strata "$pack/bin/strata" --work-dir /tmp/strata-ref
    done
  done
}
group_strategies() {
  local check=(python3 tests/multirank/check_ddp_equivalence.py --strata "$pack/bin/strata" --work-dir /tmp/strata-ranks
    --device cuda)
  run fsdp_full_adam "${check[@]}" --nproc 2 --strategy fsdp:full --optimizer adam --tolerance 5e-5
  run fsdp_grad_op_accum2 "${check[@]}" --nproc 2 --grad-accum 2 --strategy fsdp:grad_op
  run fsdp_full_nproc4 "${check[@]}" --nproc 4 --strategy fsdp:full
  run fsdp_hybrid_nnodes2 "${check[@]}" --nproc 2 --nnodes 2 --strategy fsdp:hybrid --master-port 29805
  # 16-bit collectives, sharded accumulation and offloading to the host (Tensor::convertFrom's CUDA kernel).
  run fsdp_bf16_reduce "${check[@]}" --nproc 2 --strategy fsdp:full --precision bf16 --strategy-opt reduce_dtype=bf16 \
    --tolerance 2e-2
  run fsdp_sharded_accum_offload_optimizer "${check[@]}" --nproc 2 --grad-accum 2 --strategy fsdp:grad_op \
    --strategy-opt accumulate=sharded --strategy-opt offload=optimizer --optimizer adam --tolerance 5e-5
  run fsdp_offload_params "${check[@]}" --nproc 2 --strategy fsdp:full --strategy-opt offload=params
  # Parameter-server workers on the GPU (Note [PS workers on a device]); not yet run on a GPU.
  run ps_sync_servers2_adam "${check[@]}" --nproc 2 --strategy ps:2 --optimizer adam --tolerance 5e-5
}
group_bench() {  # one step per model, so the rows measured before a cut still come back
  # BENCH_MODELS, BENCH_PRECISIONS and BENCH_ROUNDS shorten it when the lease is short (all four precisions take
  # ~2 min a model).
  for model in ${BENCH_MODELS:-resnet50_224 resnet50_32 vgg16_224 convnext_tiny_224}; do
    run "bench_$model" python3 bench/gpu_train_throughput.py --strata "$pack/bin/strata" --models "$model" \
      --precisions "${BENCH_PRECISIONS:-fp32,tf32,bf16,fp16}" --rounds "${BENCH_ROUNDS:-3}"
  done
}
group_extra() {
  # CUDA graphs where launches weigh most (small images); auto decides after 8 steps, so 10 warm-up steps.
  run bench_graph python3 bench/gpu_train_throughput.py --strata "$pack/bin/strata" --models resnet50_32 \
    --precisions tf32,bf16 --cuda-graph auto --warmup 10
  # What channels-last buys in bf16: the same models with NHWC off on both sides (the main table runs it on).
  run bench_nchw python3 bench/gpu_train_throughput.py --strata "$pack/bin/strata" \
    --models resnet50_224,vgg16_224 --precisions bf16 --channels-last off
}
for what in "$@"; do
  case "$what" in
    tests) group_ops; group_models; group_mixed; group_strategies ;;
    all) group_ops; group_models; group_mixed; group_strategies; group_bench; group_extra ;;
    *) "group_$what" ;;
  esac
done
archive
cat "$summary"
exit $status
