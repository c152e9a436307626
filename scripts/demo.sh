#!/usr/bin/env bash
# The main job on its built-in default: build, inspect the bundled CNN and run it forward once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
"$build_dir/cli/strata" inspect
"$build_dir/cli/strata" run --input-shape 64,1,28,28 --output-dir "$build_dir/demo-output"
