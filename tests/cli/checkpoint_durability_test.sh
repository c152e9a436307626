#!/usr/bin/env bash
# Checkpoints reach the disk before they are published (Note [Checkpoint durability], cli/run/durable_files.h): a
# 2-rank DDP run saving after each of 2 epochs runs under strace, and for the published checkpoint (the second
# save, which replaces the first with the renameat2 exchange):
#   every tensor file, manifest and state.json was fsynced (under checkpoint.tmp) before the exchange,
#   every rank directory and checkpoint.tmp itself were fsynced after their last entry and before the exchange,
#   the run directory was fsynced after the exchange.
# A power cut cannot be tested here; this checks the order of the system calls that make the publish durable.
set -euo pipefail
strata=$1
port=$2
command -v strace > /dev/null || { echo "SKIP: strace is not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run="$work/run"
strace -f -qq -y -e trace=fsync,rename,renameat,renameat2 -o "$work/trace" \
  "$strata" train --data synthetic --synthetic-samples 64 --batch-size 16 --epochs 2 --seed 1 --threads 1 \
  --strategy ddp --nproc 2 --master-port "$port" --save --out "$run" > "$work/log" 2>&1 ||
  { cat "$work/log"; exit 1; }
/usr/bin/python3 - "$work/trace" "$run" <<'PY'
import os, re, sys
trace, run = sys.argv[1], sys.argv[2]
lines = open(trace).read().splitlines()
fsync = re.compile(r'fsync\(\d+<([^>]*)>')
exchange = [i for i, l in enumerate(lines)
            if 'renameat2(' in l and f'"{run}/checkpoint.tmp"' in l and 'RENAME_EXCHANGE' in l and l.rstrip().endswith('= 0')]
if not exchange:
    sys.exit(f"no successful renameat2 exchange of {run}/checkpoint.tmp in the trace:\n" + "\n".join(lines[-40:]))
publish = exchange[-1]
# The window of this checkpoint's writing: after the previous publish (the first save's plain rename).
first = [i for i, l in enumerate(lines) if f'"{run}/checkpoint.tmp", ' in l and f'"{run}/checkpoint"' in l and i < publish]
start = first[-1] if first else 0
synced_before = [(i, m.group(1)) for i, l in enumerate(lines[start:publish], start) if (m := fsync.search(l))]
synced_paths = {p for _, p in synced_before}
problems = []
tmp = f"{run}/checkpoint.tmp"
published = f"{run}/checkpoint"
count = 0
for dirpath, _, files in os.walk(published):
    for name in files:
        rel = os.path.relpath(os.path.join(dirpath, name), published)
        written = os.path.join(tmp, rel)
        # JSON files are written as NAME.tmp, fsynced, then renamed.
        candidates = {written, written + ".tmp"}
        if not candidates & synced_paths:
            problems.append(f"{rel} was not fsynced before the publish")
        count += 1
def last_index(path, lines_range):
    found = [i for i, p in synced_before if p == path]
    return found[-1] if found else None
for d in sorted(os.listdir(published)):
    if d.startswith("rank"):
        i = last_index(os.path.join(tmp, d), None)
        renames = [k for k in range(start, publish) if f'"{tmp}/{d}/manifest.json"' in lines[k] and 'rename' in lines[k]]
        if i is None or (renames and i < renames[-1]):
            problems.append(f"directory {d} was not fsynced after its manifest was renamed into it")
i = last_index(tmp, None)
state_rename = [k for k in range(start, publish) if f'"{tmp}/state.json"' in lines[k] and 'rename' in lines[k]]
if i is None or (state_rename and i < state_rename[-1]):
    problems.append("checkpoint.tmp was not fsynced after state.json was renamed into it")
after = [m.group(1) for l in lines[publish + 1:] if (m := fsync.search(l))]
if run not in after:
    problems.append(f"the run directory {run} was not fsynced after the exchange")
if problems:
    sys.exit("\n".join(problems))
print(f"{count} files and {len(os.listdir(published))} entries of the published checkpoint were on disk before the "
      f"exchange; the run directory was synced after it ({len(synced_before)} fsyncs for this checkpoint)")
PY
