#!/usr/bin/env bash
# hp train with pipeline parallelism (parallel.pp, train/pipeline_step.h): at pp 2 with gpipe,
# 1f1b, interleaved_1f1b (2 virtual stages), zb_h1 and zb_h2, at pp 4 with 1f1b, zb_h1 and zb_h2
# (4 microbatches: fewer than zb_h2's 2·pp − 1, its shortened lags), an uneven cut,
# pp 2 × dp_shard 2, pp 2 × tp 2 (with recompute) on 4 ranks and packed documents, every step's
# loss equals the 1-rank run's with the same micro-batching (f32, within 1e-5 relative, 10 steps),
# and each step logs the measured bubble beside the theory and the model at the measured costs.
# (train_pp3.sh, train_pp4.sh: pp 3 and 4; train_pp_resume.sh: resume across pp, MoE, profile,
# errors.)
# Usage: train_pp.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
pipeline_yaml \
  "{arch: qwen3, hidden: 32, layers: 4, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259}" \
  "{steps: 10, batch_size: 8, seq_len: 32, seed: 3, mixed_precision: f32, grad_accum: 4}"
run ref 1
for schedule in gpipe 1f1b zb_h1 zb_h2; do
  matches_ref "pp2_$schedule" 2 --set parallel.pp=2 --set parallel.pipeline.schedule=$schedule
  grep -q "pipeline: pp 2, schedule $schedule, 4 microbatches, 2 stages of \[2, 2\] layers" \
    "$dir/pp2_$schedule.log"
done
# Receives posted when their action comes up (HP_PP_RECV_AHEAD=0, bench_pipeline's comparison)
# give the same losses as posted ahead (the default, above).
HP_PP_RECV_AHEAD=0 matches_ref pp2_zb_h1_recv_when_needed 2 --set parallel.pp=2 \
  --set parallel.pipeline.schedule=zb_h1
# Each step logs the measured bubble of every pipeline rank beside the schedule's theory and the
# schedule simulated at the step's measured action times.
grep -q "^step 10/10 .* bubble [0-9.]*/[0-9.]* (theory 0.20, at the measured costs [0-9.]*/[0-9.]*)" \
  "$dir/pp2_1f1b.log"
num='[0-9.e-]*'
grep -q "\"pp_bubble\":\[$num,$num\],\"pp_bubble_model\":\[$num,$num\],\"pp_bubble_theory\":0.0769" \
  "$dir/pp2_zb_h1/metrics.jsonl"
# [stages × 4] action times: F, I and W > 0 on both stages, B 0 (split).
pos='[0-9.]*[1-9][0-9.e-]*'
grep -q "\"pp_action_s\":\[$pos,0.0,$pos,$pos,$pos,0.0,$pos,$pos\]" "$dir/pp2_zb_h1/metrics.jsonl"
matches_ref pp2_interleaved 2 --set parallel.pp=2 \
  --set parallel.pipeline.schedule=interleaved_1f1b --set parallel.pipeline.virtual_stages=2
grep -q "4 stages of \[1, 1, 1, 1\] layers" "$dir/pp2_interleaved.log"
for schedule in 1f1b zb_h1 zb_h2; do
  matches_ref "pp4_$schedule" 4 --set parallel.pp=4 --set parallel.pipeline.schedule=$schedule
done
# Uneven cut, and pp 2 × dp_shard 2 (FSDP inside each stage).
matches_ref pp2_uneven 2 --set parallel.pp=2 --set "parallel.pipeline.layers_per_stage=[3, 1]"
grep -q "2 stages of \[3, 1\] layers" "$dir/pp2_uneven.log"
matches_ref pp2_dp2 4 --set parallel.pp=2
grep -q "parallel: 4 rank(s), pp 2 × (dp_replicate 1 × dp_shard 2" "$dir/pp2_dp2.log"
matches_ref pp2_tp2 4 --set parallel.pp=2 --set parallel.tp=2 --set recompute.mode=full
# Packed documents (a verse per document; attention within it, positions restarting): every
# stage's layers get the micro-batch's document ids and positions.
docs=(--set 'data.doc_separator="\n"' --set data.document_mask=true)
run ref_docs 1 "${docs[@]}"
run pp2_docs 2 --set parallel.pp=2 "${docs[@]}"
grep -q "packed documents: attention within each document, positions restart" "$dir/pp2_docs.log"
compare "pp 2 vs 1 rank with packed documents" "$dir/ref_docs" "$dir/pp2_docs" 1e-5 10
if compare "packed documents vs not (must differ)" "$dir/ref" "$dir/ref_docs" 1e-5 10; then exit 1; fi
echo "pipeline parallel runs agree"
