#!/usr/bin/env bash
# Checkpoints under faults (issue 17), with 2 DDP ranks; one case per run (the first argument):
#   killed     rank 0 is SIGKILLed while writing its second checkpoint (test hook STRATA_TEST_CHECKPOINT_KILL):
#              the first checkpoint stays published and resumes to the same weights as an uninterrupted run.
#   disk-full  the second checkpoint meets a full disk: a 5 MB tmpfs (in a user and mount namespace, where one can
#              be made) and a file size limit (ulimit -f, always): the error says why, the partial files are
#              removed, and the first checkpoint resumes to the same weights as an uninterrupted run.
#   corrupt    a truncated tensor file, one flipped byte in a tensor's data, a manifest without checksums and a
#              format-2 checkpoint: each resume fails with exit status 1 and a message naming the file and the
#              tensor (or the manifest); none crashes or loads.
set -euo pipefail
case_name=$1
strata=$2
port=$3
work=${4:-}
inside=false
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'for pid in $(pgrep -f -- "$work/" || true); do kill -KILL "$pid" 2> /dev/null || true; done; rm -rf "$work"' EXIT
else
  inside=true  # re-run by the disk-full case inside its own mount namespace, in the caller's directory
fi
common=(--data synthetic --synthetic-samples 256 --batch-size 16 --seed 1 --epochs 3 --lr-schedule constant
        --nproc 2 --strategy ddp --threads 1 --master-port "$port")

# The uninterrupted run the resumed ones must equal (deterministic: same data order, same reduction order).
reference() {
  "$strata" train "${common[@]}" --out "$work/full" --export "$work/full.onnx" > "$work/full.out" 2>&1 \
    || { cat "$work/full.out"; exit 1; }
}
# Fails unless RUN's published checkpoint is the one after epoch EPOCHS.
expect_checkpoint_after() {
  local run=$1 epochs=$2
  grep -q "\"epochs_done\": $epochs" "$run/checkpoint/state.json" \
    || { echo "$run/checkpoint is not the one after epoch $epochs:"; cat "$run/checkpoint/state.json"; exit 1; }
}
# Resumes RUN to the end and compares the exported model with the uninterrupted run's, byte for byte.
resume_and_compare() {
  local run=$1
  "$strata" train "${common[@]}" --resume "$run" --save --export "$run.onnx" > "$run.resume.out" 2>&1 \
    || { echo "resuming $run failed:"; cat "$run.resume.out"; exit 1; }
  grep -q "resumed from $run/checkpoint after epoch 1 (step 8)" "$run.resume.out" \
    || { echo "did not resume after epoch 1:"; cat "$run.resume.out"; exit 1; }
  cmp "$work/full.onnx" "$run.onnx" || { echo "$run resumed to other weights than the uninterrupted run"; exit 1; }
  expect_checkpoint_after "$run" 3
}
# Resumes RUN and expects it to fail with exit status 1 (an error, not a crash) and PATTERN in the message.
expect_refused() {
  local run=$1 pattern=$2 status=0
  "$strata" train "${common[@]}" --resume "$run" > "$run.out" 2>&1 || status=$?
  [ "$status" -eq 1 ] || { echo "resuming $run: exit status $status, expected 1:"; cat "$run.out"; exit 1; }
  grep -Eq -- "$pattern" "$run.out" || { echo "expected '$pattern' resuming $run:"; cat "$run.out"; exit 1; }
  if grep -q "epoch 1 step\|signal" "$run.out"; then echo "resuming $run trained or crashed:"; cat "$run.out"; exit 1; fi
}
# RUN/checkpoint/rank0's tensor file holding KEY (from the manifest).
tensor_file() {
  local run=$1 key=$2
  "${STRATA_PYTHON:-python3}" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tensors"][sys.argv[2]]["file"])' \
    "$run/checkpoint/rank0/manifest.json" "$key"
}
# The first epoch, checkpointed.
first_epoch() {
  local run=$1
  "$strata" train "${common[@]}" --save --stop-after-epoch 1 --out "$run" > "$run.first.out" 2>&1 \
    || { cat "$run.first.out"; exit 1; }
  expect_checkpoint_after "$run" 1
}

case $case_name in
killed)
  reference
  run="$work/killed"
  first_epoch "$run"
  status=0
  STRATA_TEST_CHECKPOINT_KILL=0:1 "$strata" train "${common[@]}" --resume "$run" --save > "$run.out" 2>&1 \
    || status=$?
  [ "$status" -ne 0 ] || { echo "the run survived the kill"; cat "$run.out"; exit 1; }
  grep -q "rank 0 was killed by signal 9 (SIGKILL)" "$run.out" || { cat "$run.out"; exit 1; }
  [ -d "$run/checkpoint.tmp/rank0" ] || { echo "rank 0 was not killed while writing"; ls -R "$run"; exit 1; }
  [ ! -f "$run/checkpoint.tmp/rank0/manifest.json" ] || { echo "the killed rank finished its manifest"; exit 1; }
  expect_checkpoint_after "$run" 1
  resume_and_compare "$run"
  [ ! -e "$run/checkpoint.tmp" ] || { echo "checkpoint.tmp left after a good save"; ls -R "$run"; exit 1; }
  ;;
disk-full)
  if ! $inside; then
    reference
    # (1) A full file system, where a tmpfs can be mounted (root, or an unprivileged user namespace).
    if unshare -rm --propagation private true 2> /dev/null; then
      unshare -rm --propagation private bash "$0" disk-full-tmpfs "$strata" "$port" "$work"
      resume_and_compare "$work/copy"
    else
      echo "skipped the tmpfs case: no mount namespace can be made here (unshare -rm failed)"
    fi
    # (2) A file size limit: the second checkpoint's largest tensor file is over 1 MB, the limit 512 KB.
    run="$work/limited"
    first_epoch "$run"
    status=0
    (ulimit -f 512; trap '' XFSZ; "$strata" train "${common[@]}" --resume "$run" --save > "$run.out" 2>&1) || status=$?
    [ "$status" -eq 1 ] || { echo "exit status $status with a file size limit"; cat "$run.out"; exit 1; }
    grep -q "checkpoint.tmp/rank0/t[0-9]*.pb: cannot write tensor '[^']*': File too large" "$run.out" \
      || { echo "expected a write error naming the file and tensor"; cat "$run.out"; exit 1; }
    [ ! -e "$run/checkpoint.tmp/rank0" ] || { echo "partial files left in checkpoint.tmp"; ls -R "$run"; exit 1; }
    expect_checkpoint_after "$run" 1
    resume_and_compare "$run"
  fi
  ;;
disk-full-tmpfs)
  # Inside the namespace: the run directory on a 5 MB tmpfs holds one checkpoint (3.3 MB) but not a second.
  mkdir -p "$work/disk"
  mount -t tmpfs -o size=5m tmpfs "$work/disk"
  run="$work/disk/run"
  first_epoch "$run"
  status=0
  "$strata" train "${common[@]}" --resume "$run" --save > "$work/disk.out" 2>&1 || status=$?
  [ "$status" -eq 1 ] || { echo "exit status $status on a full disk"; cat "$work/disk.out"; exit 1; }
  grep -q "cannot write tensor '[^']*': No space left on device" "$work/disk.out" \
    || { echo "expected a write error naming the file, the tensor and the full disk"; cat "$work/disk.out"; exit 1; }
  [ ! -e "$run/checkpoint.tmp/rank0" ] || { echo "partial files left on the full disk"; ls -R "$run"; exit 1; }
  expect_checkpoint_after "$run" 1
  echo "full disk: $(grep -o "cannot write tensor.*" "$work/disk.out" | head -1)"
  cp -r "$run" "$work/copy"
  exit 0
  ;;
corrupt)
  run="$work/good"
  first_epoch "$run"
  # The largest parameter: its raw data is most of its file.
  key=$("${STRATA_PYTHON:-python3}" -c 'import json,sys
t = json.load(open(sys.argv[1]))["tensors"]
print(max((e["bytes"], k) for k, e in t.items() if k.startswith("param/"))[1])' "$run/checkpoint/rank0/manifest.json")
  file=$(tensor_file "$run" "$key")
  size=$(stat -c %s "$run/checkpoint/rank0/$file")
  # Truncated: half the file.
  cp -r "$run" "$work/truncated"
  truncate -s $((size / 2)) "$work/truncated/checkpoint/rank0/$file"
  expect_refused "$work/truncated" \
    "rank0/$file: tensor '$key' is damaged: the file has $((size / 2)) bytes, the manifest says $size"
  # One byte flipped in the last quarter of the file (the tensor's raw data, not its header).
  cp -r "$run" "$work/flipped"
  at=$((size * 3 / 4))
  byte=$(od -An -tu1 -j "$at" -N1 "$work/flipped/checkpoint/rank0/$file" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ 0x10)))" \
    | dd of="$work/flipped/checkpoint/rank0/$file" bs=1 seek="$at" conv=notrunc status=none
  expect_refused "$work/flipped" "rank0/$file: tensor '$key' is damaged: CRC32 [0-9a-f]{8}, the manifest says"
  # Every tensor file of the good checkpoint still loads (the copies above changed nothing there).
  "$strata" train "${common[@]}" --resume "$run" --max-steps 9 > "$run.out" 2>&1 || { cat "$run.out"; exit 1; }
  # A manifest without checksums (as format 2 wrote them: key -> file name).
  cp -r "$run" "$work/nochecksum"
  "${STRATA_PYTHON:-python3}" - "$work/nochecksum/checkpoint/rank0/manifest.json" << 'EOF'
import json, sys
manifest = json.load(open(sys.argv[1]))
manifest["tensors"] = {key: entry["file"] for key, entry in manifest["tensors"].items()}
json.dump(manifest, open(sys.argv[1], "w"))
EOF
  expect_refused "$work/nochecksum" "rank0/manifest.json: tensor '[^']+' has no checksum"
  # A whole format-2 checkpoint.
  cp -r "$run" "$work/format2"
  sed -i 's/"format": 3/"format": 2/' "$work/format2/checkpoint/state.json"
  expect_refused "$work/format2" "checkpoint format 2 was written by an older Strata; this one reads format 3"
  # A tensor file swapped for another: the size or checksum differs, so it is caught before its name is read.
  cp -r "$run" "$work/swapped"
  other=$(ls "$work/swapped/checkpoint/rank0/" | grep -v "^$file$" | grep '\.pb$' | head -1)
  cp "$work/swapped/checkpoint/rank0/$other" "$work/swapped/checkpoint/rank0/$file"
  expect_refused "$work/swapped" "rank0/$file: tensor '$key' is damaged"
  # Two manifest entries swapped, checksums and all: each file is whole, but holds the other tensor.
  cp -r "$run" "$work/relabelled"
  "${STRATA_PYTHON:-python3}" - "$work/relabelled/checkpoint/rank0/manifest.json" "$key" << 'EOF'
import json, sys
path, key = sys.argv[1], sys.argv[2]
manifest = json.load(open(path))
tensors = manifest["tensors"]
other = next(k for k in tensors if k != key and k.startswith("param/"))
tensors[key], tensors[other] = tensors[other], tensors[key]
json.dump(manifest, open(path, "w"))
EOF
  expect_refused "$work/relabelled" "rank0/t[0-9]+[.]pb: holds tensor '[^']+', but the manifest lists it as '[^']+'"
  ;;
*)
  echo "unknown case $case_name (killed, disk-full or corrupt)"; exit 2
  ;;
esac
echo "checkpoint faults $case_name: passed"
