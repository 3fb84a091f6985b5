#!/usr/bin/env bash
# Prints the exact losses and gradient norms (metrics.jsonl: 17 significant digits) of a few steps
# of every bundled training config on the layouts a refactor must keep bitwise: f32 and bf16, 1 and
# 2 ranks, cp 2, lazy fusion, pp 2, ep 2, MXFP8, MoE, validation. Diff the output of two builds to show a change
# leaves training bitwise unchanged:
#   bash tools/loss_fingerprint.sh build/hp > before.txt   # on the old tree
#   bash tools/loss_fingerprint.sh build/hp > after.txt && diff before.txt after.txt
# Usage: loss_fingerprint.sh HP_BINARY [STEPS (default 4)]. Runs from the repository root.
set -euo pipefail
hp=$(realpath "$1")
steps=${2:-4}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HP_NUM_THREADS=${HP_NUM_THREADS:-2} OMPI_MCA_btl_vader_single_copy_mechanism=none

# name | ranks | config | extra --set overrides (space-separated)
cases=(
  "default-f32|1|configs/default.yaml|training.mixed_precision=f32"
  "default-bf16|1|configs/default.yaml|training.mixed_precision=bf16"
  "default-f32-dp2|2|configs/default.yaml|training.mixed_precision=f32"
  "default-bf16-dp2|2|configs/default.yaml|training.mixed_precision=bf16"
  "default-f32-cp2|2|configs/default.yaml|training.mixed_precision=f32 parallel.cp=2"
  "default-bf16-lazy|1|configs/default.yaml|training.mixed_precision=bf16 training.fusion=lazy"
  "moe|1|configs/moe.yaml|"
  "moe-ep2|2|configs/moe.yaml|parallel.ep=2"
  "mxfp8|1|configs/mxfp8.yaml|"
  "pipeline-pp2|2|configs/pipeline.yaml|"
  "validation|1|configs/validation.yaml|"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name ranks config extra <<< "$c"
  dir="$tmp/$name"
  args=(train "$config" --set "training.steps=$steps" --set training.sample_tokens=0
        --set checkpoint.interval=100000 --set lr_scheduler.warmup_steps=1
        --set metrics.log_every=1
        --set "run.dir=$dir")
  for e in $extra; do args+=(--set "$e"); done
  if ((ranks > 1)); then
    HP_NUM_THREADS=1 "$hp" launch -n "$ranks" -- "$hp" "${args[@]}" > "$tmp/$name.log" 2>&1
  else
    "$hp" "${args[@]}" > "$tmp/$name.log" 2>&1
  fi || { echo "$name: hp train failed"; tail -n 20 "$tmp/$name.log"; exit 1; }
  # One line per metrics.jsonl record: its step, loss, grad_norm (or eval_loss) as written.
  while IFS= read -r rec; do
    echo "$name $(grep -o '"\(step\|loss\|grad_norm\|eval_loss\)":[^,}]*' <<< "$rec" | sort | paste -sd' ')"
  done < "$dir/metrics.jsonl"
done
