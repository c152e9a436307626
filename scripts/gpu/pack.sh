#!/usr/bin/env bash
# Builds Strata for Hopper GPUs (sm_90) on this machine (it has the CUDA toolkit but no GPU) and packs everything
# the GPU machine lacks into .gpu-pack/strata-gpu.tar.xz (git-ignored, under the device tool's 64 MiB limit):
# the binaries, the strategy plugins, the Debian shared libraries they need (oneDNN, ONNX, protobuf, Gloo, fmt,
# spdlog, ZeroMQ, ...) and the generated ONNX node test suite. cuDNN, cuBLAS and NCCL are not packed: the GPU
# machine has them inside PyTorch's nvidia-* Python packages (device_run.sh points LD_LIBRARY_PATH there).
#
# Then, with the device tool:  run(command="scripts/gpu/device_run.sh ops models", carry=[".gpu-pack"])
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
# SKIP_CONFIGURE=1 packs an existing build as it is configured (e.g. BUILD=build, architectures 80 and 90).
if [ -z "${SKIP_CONFIGURE:-}" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTRATA_CUDA=ON >/dev/null
fi
cmake --build "$BUILD" --target strata strata_unit_tests strata_conformance_tests strata_plugin_single \
  strata_plugin_ddp strata_plugin_fsdp strata_plugin_ps default_model
stage=.gpu-pack/stage
rm -rf .gpu-pack && mkdir -p "$stage/bin" "$stage/lib" "$stage/plugins" "$stage/models"
cp "$BUILD/cli/strata" "$BUILD/tests/strata_unit_tests" "$BUILD/tests/conformance/strata_conformance_tests" \
  "$stage/bin/"
find "$BUILD/plugins" -name '*.so' -exec cp {} "$stage/plugins/" \;
cp "$BUILD"/models/*.onnx "$stage/models/"
# Shared libraries from Debian packages; not the C/C++ runtime (newer on the GPU machine) nor CUDA's libraries.
for binary in "$stage"/bin/* "$stage"/plugins/*.so; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
  grep -v -E 'lib(cudnn|cublas|cublasLt|nccl|cuda|cudart)[._]' | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
/usr/bin/python3 scripts/generate_onnx_node_tests.py "$stage/onnx-node-tests" >/dev/null
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*.so* 2>/dev/null || true
# One xz stream with a 64 MiB dictionary: the binaries share most of their (CUDA) bytes.
tar -C "$stage" -cf - . | xz -T1 -9 > .gpu-pack/strata-gpu.tar.xz
rm -rf "$stage"
size=$(stat -c %s .gpu-pack/strata-gpu.tar.xz)
echo "packed .gpu-pack/strata-gpu.tar.xz: $((size / 1048576)) MiB"
if [ "$size" -gt $((60 * 1048576)) ]; then
  echo "too large for the device tool's 64 MiB working-tree limit" >&2
  exit 1
fi
