#!/usr/bin/env bash
# hp train with pipeline parallelism, continued (train_pp.sh): a run saved at pp 2 resumes at pp 1
# and one saved at pp 1 at pp 2 with the losses of the uninterrupted run; a mixture-of-experts
# model with its router loss at every pipeline layout equals 1 rank; tied embeddings at every pipeline layout equal 1 rank (and so does
# the end-of-run sample); so does DeepSeek-V3's bias balancing; validation passes under pp equal
# 1 rank's, and hp eval at pp 2 repeats the run's last; hp train --profile puts every pipeline action on each rank's
# Chrome trace; bad pipeline keys fail naming the key and values.
# Usage: train_pp_resume.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
pipeline_yaml \
  "{arch: qwen3, hidden: 32, layers: 4, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259}" \
  "{steps: 6, batch_size: 8, seq_len: 32, seed: 3, mixed_precision: f32, grad_accum: 4}"
run ref 1
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
expect_error bad_schedule 2 "parallel.pipeline.schedule: must be one of gpipe|1f1b|interleaved_1f1b|zb_h1|zb_h2, got 'dualpipe'" \
  --set parallel.pp=2 --set parallel.pipeline.schedule=dualpipe
expect_error bad_micro 4 "parallel.pipeline.microbatches: 2 (training.grad_accum when 0) is fewer than parallel.pp = 4" \
  --set parallel.pp=4 --set training.grad_accum=2
expect_error bad_world 3 "parallel.pp = 2 does not divide the world size 3" --set parallel.pp=2
expect_error bad_stage 2 "parallel.dp_replicate × parallel.cp × parallel.tp = 1 × 1 × 2 does not divide the ranks of a pipeline stage, 1 (launched ranks 2 / parallel.pp 2)" \
  --set parallel.pp=2 --set parallel.tp=2
expect_error zb_mx 2 "parallel.pipeline.schedule: zb_h1 splits the linear layers' backward, which low_precision.recipe mxfp8" \
  --set parallel.pp=2 --set parallel.pipeline.schedule=zb_h1 --set low_precision.recipe=mxfp8
# A mixture-of-experts model with its router load-balancing loss (one loss over every layer's
# router logits: the stages pass its statistics along, pipeline_router_loss.h) at pp 2, zb_h1,
# interleaved and pp 4 equals 1 rank; pp 2 × dp_shard 2 equals dp_shard 2 (each data-parallel
# rank's loss over its own tokens, as transformers computes it per process); without the loss,
# pp 2 still equals 1 rank and the losses differ.
moe=(--set model.arch=qwen3_moe --set model.experts=4 --set model.experts_per_token=2
  --set model.router_aux_loss_coef=0.5)
run ref_moe 1 "${moe[@]}"
for layout in "pp2 2 --set parallel.pp=2" "zb_h1 2 --set parallel.pp=2 --set parallel.pipeline.schedule=zb_h1" \
  "interleaved 2 --set parallel.pp=2 --set parallel.pipeline.schedule=interleaved_1f1b --set parallel.pipeline.virtual_stages=2" \
  "pp4 4 --set parallel.pp=4"; do
  read -r -a l <<< "$layout"
  run "moe_${l[0]}" "${l[1]}" "${moe[@]}" "${l[@]:2}"
  compare "router loss: ${l[0]} vs 1 rank (qwen3_moe)" "$dir/ref_moe" "$dir/moe_${l[0]}" 1e-5 6
done
run moe_dp2 2 "${moe[@]}"
run moe_pp2_dp2 4 "${moe[@]}" --set parallel.pp=2
compare "router loss: pp 2 × dp_shard 2 vs dp_shard 2" "$dir/moe_dp2" "$dir/moe_pp2_dp2" 1e-5 6
run moe_pp2_ep2 4 "${moe[@]}" --set parallel.pp=2 --set parallel.ep=2
compare "router loss: pp 2 × ep 2 vs dp_shard 2" "$dir/moe_dp2" "$dir/moe_pp2_ep2" 1e-5 6
# Validation under pp: the stages' forward outside the schedule, the last stage's loss (with the
# router loss's statistics passed along): every pass equals 1 rank's, and hp eval at pp 2 repeats
# the run's last pass.
ev=(--set eval.split=0.05 --set eval.interval=3 --set eval.steps=2 --set 'data.doc_separator="\n\n"'
  --set checkpoint.interval=6)
eval_losses() { sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' "$1/metrics.jsonl"; }
run ev_ref 1 "${moe[@]}" "${ev[@]}"
for layout in "pp2 2 --set parallel.pp=2" "pp2_dp2 4 --set parallel.pp=2" \
  "interleaved 2 --set parallel.pp=2 --set parallel.pipeline.schedule=interleaved_1f1b --set parallel.pipeline.virtual_stages=2"; do
  read -r -a l <<< "$layout"
  ref=ev_ref
  [[ ${l[1]} == 4 ]] && { run ev_dp2 2 "${moe[@]}" "${ev[@]}"; ref=ev_dp2; }
  run "ev_${l[0]}" "${l[1]}" "${moe[@]}" "${ev[@]}" "${l[@]:2}"
  compare "validation: ${l[0]} vs $ref (training)" "$dir/$ref" "$dir/ev_${l[0]}" 1e-5 6
  paste <(eval_losses "$dir/$ref") <(eval_losses "$dir/ev_${l[0]}") | awk -v n="${l[0]}" '
    { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > worst) worst = d / $1 }
    END { printf "validation: %s, %d passes, worst relative difference %.3g\n", n, NR, worst
          exit !(NR == 2 && worst < 1e-5) }'
done
"$hp" launch -n 2 -- "$hp" eval "$dir/run.yaml" --set run.dir="$dir/ev_pp2" "${moe[@]}" "${ev[@]}" \
  --set parallel.pp=2 --resume auto > "$dir/ev_pp2_eval.log"
last=$(eval_losses "$dir/ev_pp2" | tail -n 1)
grep -q "eval step 6: loss $(printf '%.6f' "$last")" "$dir/ev_pp2_eval.log"
moe0=("${moe[@]}" --set model.router_aux_loss_coef=0)
run ref_moe0 1 "${moe0[@]}"
run pp2_moe0 2 --set parallel.pp=2 "${moe0[@]}"
compare "pp 2 vs 1 rank (qwen3_moe, no router loss)" "$dir/ref_moe0" "$dir/pp2_moe0" 1e-5 6
if compare "the router loss changes the losses" "$dir/ref_moe" "$dir/ref_moe0" 1e-3 6; then exit 1; fi
# hp train --profile: every rank's Chrome trace holds its pipeline actions on the timeline.
run prof 2 --set parallel.pp=2 --profile
grep -q '"pipeline F0@s0"' "$dir/prof/trace.json"
grep -q '"pipeline RECV_B3@s0"' "$dir/prof/trace.json"
grep -q '"pipeline B3@s1"' "$dir/prof/trace.rank1.json"
# Tied embeddings (Megatron's embedding group: the first and last stages each hold the matrix and
# add their gradients after backward) at pp 2, interleaved (the last of 4 stages on rank 1), pp 4,
# pp 2 × dp_shard 2 and pp 2 × tp 2 equal 1 rank; a run saved at pp 2 resumes at 1 rank; the
# end-of-run sample runs through the stages and prints 1 rank's text.
tied=(--set model.tie_embeddings=true --set training.sample_tokens=24
  --set 'training.sample_prompt="And God"')
run ref_tied 1 "${tied[@]}"
tied_layout() {
  local name=$1 n=$2
  shift 2
  run "$name" "$n" "${tied[@]}" "$@"
  compare "tied embeddings: $name vs 1 rank" "$dir/ref_tied" "$dir/$name" 1e-5 6
  cmp <(grep -a '^sample: ' "$dir/ref_tied.log") <(grep -a '^sample: ' "$dir/$name.log")
}
tied_layout tied_pp2 2 --set parallel.pp=2
tied_layout tied_interleaved 2 --set parallel.pp=2 --set parallel.pipeline.schedule=interleaved_1f1b \
  --set parallel.pipeline.virtual_stages=2
tied_layout tied_pp4 4 --set parallel.pp=4
tied_layout tied_pp2_dp2 4 --set parallel.pp=2
tied_layout tied_pp2_tp2 4 --set parallel.pp=2 --set parallel.tp=2
ckpt=(--set checkpoint.interval=3 --set training.sample_tokens=0)
run tied_saved 2 "${tied[@]}" "${ckpt[@]}" --set parallel.pp=2 --stop-after 3
run tied_saved 1 "${tied[@]}" "${ckpt[@]}" --resume auto
compare "tied embeddings: saved at pp 2, resumed at 1 rank" "$dir/ref_tied" "$dir/tied_saved" 1e-5 6
expect_error tied_mpmd 3 "parallel.pipeline.stage_ranks: with tied embeddings" "${tied[@]}" \
  --set parallel.pp=2 --set "parallel.pipeline.stage_ranks=[2, 1]"
# DeepSeek-V3's bias balancing (its layer 0 dense, layer 1 MoE): each stage counts its own layers'
# expert loads after its forwards, so pp 2 (a stage without an MoE layer) and pp 2 × dp_shard 2
# equal 1 rank; without the balancing the losses differ.
use_deepseek_v3
balance=(--set model.router_bias_update_rate=0.05)
run ref_bal 1 "${balance[@]}"
run bal_pp2 2 "${balance[@]}" --set parallel.pp=2
compare "bias balancing: pp 2 vs 1 rank" "$dir/ref_bal" "$dir/bal_pp2" 1e-5 6
run bal_pp2_dp2 4 "${balance[@]}" --set parallel.pp=2
compare "bias balancing: pp 2 × dp_shard 2 vs 1 rank" "$dir/ref_bal" "$dir/bal_pp2_dp2" 1e-5 6
run no_bal 1
if compare "bias balancing changes the losses" "$dir/ref_bal" "$dir/no_bal" 1e-7 6; then exit 1; fi
cp "$dir/base.yaml" "$dir/run.yaml"
echo "pipeline parallel resumes, MoE, tied embeddings, bias balancing, profile and errors pass"
