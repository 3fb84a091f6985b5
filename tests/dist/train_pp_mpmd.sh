#!/usr/bin/env bash
# hp train with heterogeneous pipeline stages (parallel.pipeline.stage_ranks, MPMD): on 4 ranks,
# stages of [1, 3] (1f1b and zb_h1) and [3, 1] ranks (FSDP over the 3, activations and gradients
# resharded by rows between the stages) equal the 1-rank run within 1e-5 relative (f32); a [1, 3]
# run resumes at pp 1; stage_ranks that do not fit fail naming the key and values.
# Usage: train_pp_mpmd.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
pipeline_yaml \
  "{arch: qwen3, hidden: 32, layers: 4, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259}" \
  "{steps: 6, batch_size: 12, seq_len: 32, seed: 3, mixed_precision: f32, grad_accum: 4}"
run ref 1
run mpmd_13 4 --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[1, 3]"
grep -q "on \[1, 3\] ranks (FSDP inside each, activations resharded by rows)" "$dir/mpmd_13.log"
compare "stage_ranks [1, 3] vs 1 rank" "$dir/ref" "$dir/mpmd_13" 1e-5 6
# Zero bubble on the same stages: the 3-rank stage's FSDP reduces its gradients after the last W.
run mpmd_13_zb_h1 4 --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[1, 3]" \
  --set parallel.pipeline.schedule=zb_h1
compare "stage_ranks [1, 3] (zb_h1) vs 1 rank" "$dir/ref" "$dir/mpmd_13_zb_h1" 1e-5 6
run mpmd_31 4 --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[3, 1]" \
  --set parallel.pipeline.schedule=gpipe
compare "stage_ranks [3, 1] (gpipe) vs 1 rank" "$dir/ref" "$dir/mpmd_31" 1e-5 6
run saved 4 --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[1, 3]" --stop-after 3
run saved 1 --resume auto
compare "saved at stage_ranks [1, 3], resumed at pp 1" "$dir/ref" "$dir/saved" 1e-5 6
expect_error bad_sum 4 "parallel.pipeline.stage_ranks has 2 entries summing to 2; the run needs parallel.pp = 2 entries summing to the world size 4" \
  --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[1, 1]"
expect_error bad_rows 4 "parallel.pipeline.stage_ranks: [2, 2]: a micro-batch's 3 rows (training.batch_size / grad_accum) do not split over 2 ranks" \
  --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[2, 2]"
echo "heterogeneous pipeline stages agree"
