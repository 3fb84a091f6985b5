#!/usr/bin/env bash
# hp train at pp 4, the schedules train_pp.sh does not run there: gpipe and interleaved_1f1b
# (2 virtual stages: 8 stages of one layer) on 4 ranks give the 1-rank run's losses with the same
# micro-batching within 1e-5 relative in f32 over 10 steps; a run saved at pp 2 with the cut
# [5, 3] resumes at pp 4 with the cut [1, 3, 2, 2] (checkpoints under global FQNs) with the
# uninterrupted run's losses.
# Usage: train_pp4.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
pipeline_yaml \
  "{arch: qwen3, hidden: 16, layers: 8, heads: 2, kv_heads: 1, intermediate: 32, vocab: 259}" \
  "{steps: 10, batch_size: 4, seq_len: 16, seed: 5, mixed_precision: f32, grad_accum: 4}"
run ref 1
matches_ref pp4_gpipe 4 --set parallel.pp=4 --set parallel.pipeline.schedule=gpipe
matches_ref pp4_interleaved 4 --set parallel.pp=4 \
  --set parallel.pipeline.schedule=interleaved_1f1b --set parallel.pipeline.virtual_stages=2
grep -q "8 stages of \[1, 1, 1, 1, 1, 1, 1, 1\] layers" "$dir/pp4_interleaved.log"
run saved 2 --set parallel.pp=2 --set "parallel.pipeline.layers_per_stage=[5, 3]" --stop-after 5
grep -q "stopped at step 5" "$dir/saved.log"
run saved 4 --set parallel.pp=4 --set "parallel.pipeline.layers_per_stage=[1, 3, 2, 2]" \
  --resume auto
grep -q "resumed from .* at step 5" "$dir/saved.log"
grep -q "4 stages of \[1, 3, 2, 2\] layers" "$dir/saved.log"
compare "saved at pp 2 [5, 3], resumed at pp 4 [1, 3, 2, 2]" "$dir/ref" "$dir/saved" 1e-5 10
echo "pp 4 runs and the pp 2 -> pp 4 resume agree"
