#!/usr/bin/env bash
# hp train with expert parallelism (the parallelize step's EP): each MoE layer's experts split over
# parallel.ep ranks of dp_shard × cp, tokens sent to their experts' ranks and back. Every step's
# loss equals the same ranks' run without EP (the same per-rank batches and router losses; only
# sums run in another order) within 1e-3 relative in f32 (the layer itself agrees to 1e-5,
# expert_parallel_mpitest; over 8 training steps a token whose two best experts score within
# rounding may pick the other one, which moves the loss by ~1e-4): Qwen3-MoE at ep 2 on 2 ranks, ep 3 on 3
# (8 experts: 3, 3, 2), ep 2 and ep 4 on 4 ranks (experts FSDP-sharded over 2 ranks, or not at all), with recompute, the DeepSeek-V3
# fixture (MLA, sigmoid group-limited routing, shared experts, auxiliary-loss-free bias balancing),
# ep × cp, MXFP8 grouped experts (MegaMoE = sequential bitwise there too, in f32 and bf16) and bf16 (within 2%;
# MegaMoE = sequential bitwise). A run saved at ep 2 resumes at ep 1 and one saved at ep 4 at ep 2 with the
# uninterrupted run's losses; bad degrees fail naming the numbers. The exchange runs as MegaMoE
# (the default) except where parallel.moe.kernel=sequential; the two give bitwise-equal losses.
# Usage: train_ep.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3_moe, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 48, vocab: 259,
        experts: 4, experts_per_token: 2, tie_embeddings: true}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 8, batch_size: 4, seq_len: 32, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
run dp2 2
run ep2 2 --set parallel.ep=2
grep -q "ep 2 (each MoE layer's experts split over 2 of the dp_shard × cp ranks, FSDP over the other 1) on MegaMoE (2 expert groups)" "$dir/ep2.log"
compare "ep 2 vs dp_shard 2 (2 ranks)" "$dir/dp2" "$dir/ep2" 1e-3
# parallel.moe.kernel: MegaMoE (the default under EP, here with 2 and 1 expert groups) and the
# sequential exchange give the same losses bitwise (the layers are bitwise equal in f32).
run ep2_seq 2 --set parallel.ep=2 --set parallel.moe.kernel=sequential
grep -q "FSDP over the other 1) on the sequential exchange" "$dir/ep2_seq.log"
compare "ep 2: megamoe vs sequential" "$dir/ep2" "$dir/ep2_seq" 1e-30
run ep2_g1 2 --set parallel.ep=2 --set parallel.moe.groups=1
compare "ep 2: megamoe G 1 vs G 2" "$dir/ep2" "$dir/ep2_g1" 1e-30
run dp4 4
run ep2_dp4 4 --set parallel.ep=2
compare "ep 2 on 4 ranks vs dp_shard 4" "$dir/dp4" "$dir/ep2_dp4" 1e-3
run ep4 4 --set parallel.ep=4
compare "ep 4 on 4 ranks vs dp_shard 4" "$dir/dp4" "$dir/ep4" 1e-3
# Uneven: 8 experts over 3 ranks hold 3, 3 and 2.
run dp3 3 --set model.experts=8 --set training.batch_size=6
run ep3 3 --set model.experts=8 --set training.batch_size=6 --set parallel.ep=3
compare "ep 3 (8 experts: 3, 3, 2) vs dp_shard 3" "$dir/dp3" "$dir/ep3" 1e-3
run ep2_recompute 2 --set parallel.ep=2 --set recompute.mode=full
compare "ep 2 with recompute full vs dp_shard 2" "$dir/dp2" "$dir/ep2_recompute" 1e-3
run cp2_dp2 4 --set parallel.cp=2
run ep2_cp2 4 --set parallel.cp=2 --set parallel.ep=2
compare "ep 2 × cp 2 vs cp 2 (4 ranks)" "$dir/cp2_dp2" "$dir/ep2_cp2" 1e-3
mx=(--set low_precision.recipe=mxfp8 --set 'low_precision.modules=["*.mlp.experts"]')
run mx_dp2 2 "${mx[@]}"
run mx_ep2 2 "${mx[@]}" --set parallel.ep=2
compare "MXFP8 grouped experts: ep 2 vs dp_shard 2" "$dir/mx_dp2" "$dir/mx_ep2" 1e-3
# MX experts run inside MegaMoE's plans with the sequential path's quantization points: bitwise.
run mx_ep2_seq 2 "${mx[@]}" --set parallel.ep=2 --set parallel.moe.kernel=sequential
compare "MXFP8 grouped experts at ep 2: megamoe vs sequential" "$dir/mx_ep2" "$dir/mx_ep2_seq" 1e-30
# bf16 (activations and gathered parameters): MegaMoE's MX experts round where the sequential
# exchange's do, so the losses are bitwise equal there too.
run mx_bf16_ep2 2 "${mx[@]}" --set training.mixed_precision=bf16 --set parallel.ep=2
run mx_bf16_ep2_seq 2 "${mx[@]}" --set training.mixed_precision=bf16 --set parallel.ep=2 \
  --set parallel.moe.kernel=sequential
compare "MXFP8 grouped experts in bf16 at ep 2: megamoe vs sequential" "$dir/mx_bf16_ep2" \
  "$dir/mx_bf16_ep2_seq" 1e-30
run bf16_dp2 2 --set training.mixed_precision=bf16
run bf16_ep2 2 --set training.mixed_precision=bf16 --set parallel.ep=2
compare "bf16: ep 2 vs dp_shard 2" "$dir/bf16_dp2" "$dir/bf16_ep2" 0.02
# bf16 rows of the f32 experts travel as bf16 under MegaMoE too, widened and rounded where the
# sequential exchange casts: bitwise-equal losses.
run bf16_ep2_seq 2 --set training.mixed_precision=bf16 --set parallel.ep=2 \
  --set parallel.moe.kernel=sequential
compare "bf16 at ep 2: megamoe vs sequential" "$dir/bf16_ep2" "$dir/bf16_ep2_seq" 1e-30
# Saved at ep 2 after step 4, resumed without EP; saved at ep 4, resumed at ep 2.
run saved 2 --set parallel.ep=2 --stop-after 4
grep -q "stopped at step 4" "$dir/saved.log"
run saved 2 --resume auto
grep -q "resumed from .* at step 4" "$dir/saved.log"
compare "saved at ep 2, resumed at ep 1" "$dir/dp2" "$dir/saved" 1e-3
run saved4 4 --set parallel.ep=4 --stop-after 4
run saved4 4 --set parallel.ep=2 --resume auto
grep -q "resumed from .* at step 4" "$dir/saved4.log"
compare "saved at ep 4, resumed at ep 2" "$dir/dp4" "$dir/saved4" 1e-3
# MLA with MoE layers: the DeepSeek-V3 fixture.
use_deepseek_v3
run mla_dp2 2
run mla_ep2 2 --set parallel.ep=2
compare "deepseek_v3 (MLA + MoE) ep 2 vs dp_shard 2" "$dir/mla_dp2" "$dir/mla_ep2" 1e-3
# Auxiliary-loss-free balancing (a large rate, so the routing changes within 8 steps): the biases
# move from the global counts, so ep 2 equals dp_shard 2, and the losses leave the run without it.
run bal_dp2 2 --set model.router_bias_update_rate=0.05
run bal_ep2 2 --set model.router_bias_update_rate=0.05 --set parallel.ep=2
compare "bias balancing: ep 2 vs dp_shard 2" "$dir/bal_dp2" "$dir/bal_ep2" 1e-3
if compare "bias balancing changes the losses" "$dir/mla_dp2" "$dir/bal_dp2" 1e-7; then
  echo "router_bias_update_rate had no effect"; exit 1
fi
cp "$dir/base.yaml" "$dir/run.yaml"
# Bad input.
expect_error bad_experts 3 "parallel.ep: 3 leaves an ep rank without an expert (model.experts 4 in chunks of 2)" \
  --set parallel.ep=3
expect_error bad_ranks 2 "parallel.ep = 4 does not divide parallel.dp_shard × parallel.cp = 2 × 1" \
  --set parallel.ep=4
expect_error dense 2 "parallel.ep: 2 needs a mixture-of-experts model" \
  --set model.arch=qwen3 --set model.experts=0 --set parallel.ep=2
expect_error bad_kernel 2 "parallel.moe.kernel: must be one of megamoe|sequential, got 'fused'" --set parallel.ep=2 --set parallel.moe.kernel=fused
expect_error bad_groups 2 "parallel.moe.groups: must be >= 1, got 0" --set parallel.ep=2 --set parallel.moe.groups=0
expect_error no_bias 1 "model.router_bias_update_rate = 0.001 needs MoE layers whose router has a" \
  --set model.router_bias_update_rate=0.001
echo "train_ep: all checks passed"
