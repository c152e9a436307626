#!/usr/bin/env bash
# The main job on its built-in default: build, inspect the bundled CNN, train it on Fashion-MNIST for 3 epochs
# and print where the summary is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
"$build_dir/cli/strata" inspect
"$build_dir/cli/strata" train --epochs 3 --out "$root/runs/default"
