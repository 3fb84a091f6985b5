#!/usr/bin/env bash
# hp train with pipeline parallelism (parallel.pp, train/pipeline_step.h): at pp 2 with gpipe,
# 1f1b, interleaved_1f1b (2 virtual stages) and zb_h1, at pp 4 with 1f1b and zb_h1, an uneven cut,
# pp 2 × dp_shard 2 and pp 2 × tp 2 (with recompute) on 4 ranks, every step's loss equals the
# 1-rank run's with the same micro-batching (f32, within 1e-5 relative); a run saved at pp 2
# resumes at pp 1 and one saved at pp 1 at pp 2, with the losses of the uninterrupted run; bad
# pipeline keys fail naming the key and values.
# Usage: train_pp.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 4, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 6, batch_size: 8, seq_len: 32, seed: 3, mixed_precision: f32, grad_accum: 4}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
run ref 1
for schedule in gpipe 1f1b zb_h1; do
  run "pp2_$schedule" 2 --set parallel.pp=2 --set parallel.pipeline.schedule=$schedule
  grep -q "pipeline: pp 2, schedule $schedule, 4 microbatches, 2 stages of \[2, 2\] layers" \
    "$dir/pp2_$schedule.log"
  compare "pp 2 ($schedule) vs 1 rank" "$dir/ref" "$dir/pp2_$schedule" 1e-5 6
done
# Each step logs the measured bubble of every pipeline rank beside the schedule's theory.
grep -q "^step 6/6 .* bubble [0-9.]*/[0-9.]* (theory 0.20)" "$dir/pp2_1f1b.log"
grep -q '"pp_bubble":\[[0-9.e-]*,[0-9.e-]*\],"pp_bubble_theory":0.0769' "$dir/pp2_zb_h1/metrics.jsonl"
run pp2_interleaved 2 --set parallel.pp=2 --set parallel.pipeline.schedule=interleaved_1f1b \
  --set parallel.pipeline.virtual_stages=2
grep -q "4 stages of \[1, 1, 1, 1\] layers" "$dir/pp2_interleaved.log"
compare "pp 2 (interleaved_1f1b, 2 virtual stages) vs 1 rank" "$dir/ref" "$dir/pp2_interleaved" 1e-5 6
for schedule in 1f1b zb_h1; do
  run "pp4_$schedule" 4 --set parallel.pp=4 --set parallel.pipeline.schedule=$schedule
  compare "pp 4 ($schedule) vs 1 rank" "$dir/ref" "$dir/pp4_$schedule" 1e-5 6
done
# hp train --profile: every rank's Chrome trace holds its pipeline actions on the timeline.
run prof 2 --set parallel.pp=2 --profile
grep -q '"pipeline F0@s0"' "$dir/prof/trace.json"
grep -q '"pipeline RECV_B3@s0"' "$dir/prof/trace.json"
grep -q '"pipeline B3@s1"' "$dir/prof/trace.rank1.json"
# Uneven cut, and pp 2 × dp_shard 2 (FSDP inside each stage).
run pp2_uneven 2 --set parallel.pp=2 --set "parallel.pipeline.layers_per_stage=[3, 1]"
grep -q "2 stages of \[3, 1\] layers" "$dir/pp2_uneven.log"
compare "pp 2 with layers_per_stage [3, 1] vs 1 rank" "$dir/ref" "$dir/pp2_uneven" 1e-5 6
run pp2_dp2 4 --set parallel.pp=2
grep -q "parallel: 4 rank(s), pp 2 × (dp_replicate 1 × dp_shard 2" "$dir/pp2_dp2.log"
compare "pp 2 × dp_shard 2 vs 1 rank" "$dir/ref" "$dir/pp2_dp2" 1e-5 6
run pp2_tp2 4 --set parallel.pp=2 --set parallel.tp=2 --set recompute.mode=full
compare "pp 2 × tp 2 with recompute vs 1 rank" "$dir/ref" "$dir/pp2_tp2" 1e-5 6
# Saved at pp 2 after step 3, resumed at pp 1; saved at pp 1, resumed at pp 2.
run saved_pp2 2 --set parallel.pp=2 --stop-after 3
grep -q "stopped at step 3" "$dir/saved_pp2.log"
run saved_pp2 1 --resume auto
grep -q "resumed from .* at step 3" "$dir/saved_pp2.log"
compare "saved at pp 2, resumed at pp 1" "$dir/ref" "$dir/saved_pp2" 1e-5 6
run saved_pp1 1 --stop-after 3
run saved_pp1 2 --set parallel.pp=2 --resume auto
compare "saved at pp 1, resumed at pp 2" "$dir/ref" "$dir/saved_pp1" 1e-5 6
# Bad keys: an error naming the key and the values.
expect_error bad_sum 2 "parallel.pipeline.layers_per_stage: [3, 3] sums to 6, not model.layers = 4" \
  --set parallel.pp=2 --set "parallel.pipeline.layers_per_stage=[3, 3]"
expect_error bad_schedule 2 "parallel.pipeline.schedule" \
  --set parallel.pp=2 --set parallel.pipeline.schedule=dualpipe
expect_error bad_micro 4 "parallel.pipeline.microbatches: 2 (training.grad_accum when 0) is fewer than parallel.pp = 4" \
  --set parallel.pp=4 --set training.grad_accum=2
expect_error bad_world 3 "parallel.pp = 2 does not divide the world size 3" --set parallel.pp=2
expect_error zb_dp 4 "parallel.pipeline.schedule zb_h1 needs each stage's parameters unsharded in f32" \
  --set parallel.pp=2 --set parallel.pipeline.schedule=zb_h1
echo "pipeline parallel runs agree"
