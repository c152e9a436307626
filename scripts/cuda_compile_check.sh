#!/usr/bin/env bash
# Compiles CUDA backend sources on their own (no full build), for a quick syntax and type check while writing
# kernels: ./scripts/cuda_compile_check.sh core/backend/cuda/kernels/foo.cu [more files...]
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for src in "$@"; do
  case "$src" in
    *.cu) "$NVCC" -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -DFMT_USE_CONSTEXPR=1 -Xcompiler=-Wall,-Wextra -Icore/include \
            -Icore/backend/cuda -Icore/backend/cuda/include -c "$src" -o "$out/obj.o" ;;
    *) g++ -std=c++20 -Wall -Wextra -Icore/include -Icore/backend/cuda -Icore/backend/cuda/include \
            -I/usr/local/cuda/include -c "$src" -o "$out/obj.o" ;;
  esac
  echo "ok: $src"
done
