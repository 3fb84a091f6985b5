#!/usr/bin/env bash
# hp train at pp 3 (issue 16's correctness target: pp 2, 3 and 4 × every schedule equal pp 1):
# gpipe, 1f1b, interleaved_1f1b (2 virtual stages: 6 stages of the 8 layers), zb_h1 and zb_h2 on
# 3 ranks give the 1-rank run's losses with the same micro-batching (6 microbatches: a multiple of
# pp, as interleaved needs, and at least 2·pp − 1, zb_h2's full warm-up) within 1e-5 relative in
# f32 over 10 steps. (pp 2: train_pp.sh; pp 4: train_pp4.sh.)
# Usage: train_pp3.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
pipeline_yaml \
  "{arch: qwen3, hidden: 16, layers: 8, heads: 2, kv_heads: 1, intermediate: 32, vocab: 259}" \
  "{steps: 10, batch_size: 6, seq_len: 16, seed: 5, mixed_precision: f32, grad_accum: 6}"
run ref 1
for schedule in gpipe 1f1b zb_h1 zb_h2; do
  matches_ref "pp3_$schedule" 3 --set parallel.pp=3 --set parallel.pipeline.schedule=$schedule
  grep -q "pipeline: pp 3, schedule $schedule, 6 microbatches, 3 stages of" "$dir/pp3_$schedule.log"
done
matches_ref pp3_interleaved 3 --set parallel.pp=3 \
  --set parallel.pipeline.schedule=interleaved_1f1b --set parallel.pipeline.virtual_stages=2
grep -q "6 stages of \[" "$dir/pp3_interleaved.log"
echo "pp 3 runs agree"
