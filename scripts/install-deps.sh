#!/usr/bin/env bash
# Installs every Debian 12 package Strata needs to build, test and run. Idempotent: installed packages are skipped.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libonnx-dev libprotobuf-dev protobuf-compiler libdnnl-dev opencl-headers ocl-icd-opencl-dev zlib1g-dev
  libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libzmq3-dev cppzmq-dev libboost-dev libgloo-dev
  python3 python3-numpy python3-onnx python3-torch python3-torchvision
  # Debian's torch without a real BLAS runs on netlib's reference BLAS (50x slower sgemm): the reference tests need it.
  libopenblas0-pthread
  dataset-fashion-mnist
  # Language models (docs/language-models.md): the default text corpus (the King James Bible, written out by the
  # `bible` program of bible-kjv) and SentencePiece's programs for --tokenizer sentencepiece:VOCAB.
  bible-kjv bible-kjv-text sentencepiece
  # Users' photos and segmentation masks (images:DIR, segmentation:DIR): JPEG through libjpeg-turbo, PNG through libpng.
  libturbojpeg0-dev libpng-dev
  # Reliability (docs/reliability.md): the libFuzzer targets (scripts/fuzz.sh: clang, its fuzzer and sanitizer
  # runtimes, llvm-symbolizer for the reports), the two-namespace network tests (iproute2's ip and tc; nftables for
  # packet loss where the kernel has no netem) and the checkpoint durability test (strace).
  clang-14 libclang-rt-14-dev llvm-14 iproute2 nftables strace
  # `strata compare`'s test renders report.html in a headless browser and checks the screenshot (python3-pil).
  chromium python3-pil
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
