#!/usr/bin/env bash
# `strata compare` shows the parameter servers' own memory (summary.json's "servers"; Note [Role figures]) in
# results.json, results.csv and the memory table of report.md: ps with 2 servers and with 1 (async), beside ddp,
# which has none (check_compare.py --servers).
set -euo pipefail
strata=$1
python=$2
port=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$strata" compare --strategy ddp --strategy "ps servers=2" --strategy "ps mode=async" --world-size 2 --no-predict \
  --out "$work/cmp" --master-port "$port" -- --data synthetic --synthetic-samples 256 --batch-size 16 --max-steps 4 \
  --threads 1 > "$work/compare.out" 2>&1 || { cat "$work/compare.out"; echo "strata compare failed"; exit 1; }
"$python" "$here/check_compare.py" "$work/cmp" --servers default_cnn-ps-servers-2-n2=2 \
  --servers default_cnn-ps-mode-async-n2=1
echo "compare servers: passed"
