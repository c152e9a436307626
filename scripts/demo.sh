#!/usr/bin/env bash
# The main job on its built-in default: build, inspect the bundled CNN, then train it on Fashion-MNIST for 3 epochs
# with DDP on 2 local ranks (32 samples per rank and step) and print where the summary is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
"$build_dir/cli/strata" inspect
"$build_dir/cli/strata" train --epochs 3 --nproc 2 --strategy ddp --batch-size 32 --out "$root/runs/default"
