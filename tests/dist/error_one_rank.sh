#!/usr/bin/env bash
# An error raised on one rank only ends the whole job within HP_ERROR_GRACE_S, not after the
# peers' HP_COMM_TIMEOUT_S (600 s here): rank 1 resumes from a checkpoint whose rank-1 file is
# damaged (a CRC32C mismatch only rank 1 reads: loading a checkpoint is not collective) while rank 0 goes
# on into the first step's collectives. An error every rank raises alike still exits 2 with no
# abort.
# Usage: error_one_rank.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 64, layers: 2, heads: 4, kv_heads: 2, intermediate: 128, vocab: 259}
data: {path: $dir/corpus.txt}
training: {steps: 4, batch_size: 4, seq_len: 32, mixed_precision: f32}
parallel: {dp_shard: -1}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 2, keep: 2}
YAML
run saved 2
shard=$dir/saved/step-00000002/rank-00001.safetensors
test -f "$shard"
# Flip the file's last byte (tensor data, not the safetensors header).
size=$(stat -c %s "$shard")
last=$(tail -c 1 "$shard" | od -An -tu1 | tr -d ' ')
printf "\\$(printf %03o $(((last + 1) % 256)))" |
  dd of="$shard" bs=1 seek=$((size - 1)) conv=notrunc status=none
# run_timed NAME TIMEOUT ARGS...: hp train on 2 ranks, bounded by TIMEOUT s; sets rc and took.
run_timed() {
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  rc=0
  HP_COMM_TIMEOUT_S=600 timeout -s KILL "$limit" "$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" \
    "$@" > "$dir/$name.log" 2>&1 || rc=$?
  took=$(($(date +%s) - t0))
  cat "$dir/$name.log"
  echo "$name: exit $rc after $took s"
}
# An explicit step dir (--resume auto would verify every file on every rank and refuse it alike).
HP_ERROR_GRACE_S=3 run_timed one_rank 60 --set run.dir="$dir/resumed" --resume "$dir/saved/step-00000002"
test "$rc" -ne 0
test "$rc" -ne 137  # killed by `timeout`: still blocked in MPI_Finalize (before the change)
grep -q "\[comm\] rank 1: fatal: hp train: \[ckpt\] .*rank-00001.safetensors" "$dir/one_rank.log"
grep -q "aborting the job" "$dir/one_rank.log"
# An error every rank raises alike exits 2 without MPI_Abort (mpirun's note on a non-zero exit
# stays): a config error (rank 0 alone prints it) and a layout error after MPI started (the ranks
# meet at the exit barrier; a generous grace, as they reach it at different times under load).
HP_ERROR_GRACE_S=30 run_timed config 60 --set run.dir="$dir/config" --set training.steps=-1
test "$rc" -eq 2
test "$(grep -c "\[config\] .*training.steps: must be >= 1" "$dir/config.log")" -eq 1
HP_ERROR_GRACE_S=30 run_timed layout 60 --set run.dir="$dir/layout" --set parallel.pp=2 \
  --set parallel.tp=2 --set training.grad_accum=2
test "$rc" -eq 2
grep -q "1 × 1 × 2 does not divide the ranks of a pipeline stage" "$dir/layout.log"
if grep -E "MPI_ABORT|aborting the job" "$dir/layout.log"; then exit 1; fi
