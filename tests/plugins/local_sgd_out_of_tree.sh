#!/usr/bin/env bash
# Installs the current build into a temporary prefix, builds examples/local_sgd out of tree against it with
# find_package(Strata), then checks that the installed `strata plugins` lists it (and the bundled single plugin
# from <prefix>/lib/strata/plugins) and that PluginHost creates it.
# Usage: local_sgd_out_of_tree.sh BUILD_DIR EXAMPLE_DIR UNIT_TESTS CMAKE GENERATOR
set -euo pipefail
build=$1 example=$2 unit_tests=$3 cmake=$4 generator=$5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata_local_sgd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

step() { echo "== $*"; }

step "install $build into $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
for f in bin/strata lib/libstrata_core.a include/strata-sdk/strata/sdk/strategy.h \
         lib/strata/plugins/libstrata_plugin_single.so \
         lib/cmake/Strata/StrataConfig.cmake lib/cmake/Strata/StrataTargets.cmake; do
  [[ -e $prefix/$f ]] || { echo "not installed: $f"; exit 1; }
done
# The SDK's include folder holds the SDK alone: a plugin built against Strata::sdk cannot reach the executor.
[[ ! -e $prefix/include/strata-sdk/strata/executor.h ]] || { echo "the SDK folder holds executor.h"; exit 1; }

step "configure and build $example out of tree"
"$cmake" -S "$example" -B "$tmp/build" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix"
"$cmake" --build "$tmp/build"
[[ -f $tmp/build/libstrata_plugin_local_sgd.so ]] || { echo "no libstrata_plugin_local_sgd.so in $tmp/build"; exit 1; }

step "strata plugins --plugin-dir $tmp/build"
listing=$("$prefix/bin/strata" plugins --plugin-dir "$tmp/build")
echo "$listing"
grep -Eq "^local_sgd +0\.1\.0 +6 .*$tmp/build/libstrata_plugin_local_sgd\.so\$" <<< "$listing" \
  || { echo "local_sgd is not listed"; exit 1; }
grep -Eq "^single +.*$prefix/lib/strata/plugins/libstrata_plugin_single\.so\$" <<< "$listing" \
  || { echo "the installed single plugin is not listed"; exit 1; }

step "create local_sgd through PluginHost"
result=$(STRATA_TEST_LOCAL_SGD_DIR=$tmp/build "$unit_tests" \
  --gtest_filter=PluginHostTest.OutOfTreeLocalSgdPluginLoads 2>&1) || { echo "$result"; exit 1; }
echo "$result"
grep -q "PASSED.* 1 test" <<< "$result" && ! grep -q SKIPPED <<< "$result" || { echo "the test did not run"; exit 1; }
echo "local_sgd: built out of tree, listed and created"

step "train with local_sgd by name on 2 ranks"
"$build/cli/strata" train --strategy local_sgd --plugin-dir "$tmp/build" --strategy-opt k=2 --nproc 2 \
  --data synthetic --synthetic-samples 128 --batch-size 16 --max-steps 4 --threads 1 --out "$tmp/run" > "$tmp/train.log" \
  || { cat "$tmp/train.log"; exit 1; }
grep -q '"strategy": "local_sgd"' "$tmp/run/summary.json" || { echo "summary.json does not name local_sgd"; exit 1; }
grep -q '"world_size": 2' "$tmp/run/summary.json" || { echo "summary.json does not show 2 ranks"; exit 1; }
echo "local_sgd: trained by name on 2 ranks"
