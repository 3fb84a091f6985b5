#!/usr/bin/env bash
# DeepSeek-V4 (mHC streams, sliding / CSA / HCA attention, hash- and learned-routed MoE) trained
# from the hc2 fixture directory across ranks: at parallel.dp_shard 2 (FSDP) every step's loss
# equals the 1-rank run's within 1e-5 relative (f32 parameters and reductions; only sums of shards
# run in another order). Some of its tensors shard unevenly over 2 ranks by the torch.chunk rule:
# the mHC scales [3] (2 + 1 rows) and the hyper head's scale [1] (1 + 0). A run saved at 2 ranks
# resumes at 1 rank with the uninterrupted run's losses. With parallel.ep 2 (each MoE layer's
# experts split over the 2 ranks, hash-routed layers included) the losses equal the 1-rank run's
# within 1e-5 too, and a run saved at ep 2 resumes at ep 1; likewise at parallel.tp 2 (attention
# split by heads and output groups), while tp 4 (o_groups 2) fails naming both numbers; at pp 4
# and pp 2 × dp_shard 2 too.
# Usage: train_v4.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
# Byte-level ids folded below the fixture's vocabulary (128).
head -c 20000 "$dir/corpus.txt" |
  perl -e 'binmode STDIN; binmode STDOUT; local $/; print pack("v*", map { $_ % 128 } unpack("C*", <STDIN>))' \
  > "$dir/tokens.u16"
cat > "$dir/run.yaml" <<YAML
model: {path: $root/tests/models/fixtures/deepseek_v4_hc2}
data: {path: $dir/tokens.u16, format: tokens_u16}
optimizer: {name: adamw, lr: 0.003}
training: {steps: 8, batch_size: 4, seq_len: 32, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
run ref 1
run fsdp2 2
compare "deepseek_v4 dp_shard 2 vs 1 rank" "$dir/ref" "$dir/fsdp2" 1e-5
# resumed NAME LABEL ARGS...: a run saved at 2 ranks with ARGS after step 4, resumed on
# RESUME_RANKS ranks (default 1) without ARGS, continues with the uninterrupted run's losses.
resumed() {
  local name=$1 label=$2
  shift 2
  run "$name" 2 "$@" --stop-after 4
  grep -q "stopped at step 4" "$dir/$name.log"
  run "$name" "${RESUME_RANKS:-1}" --resume auto
  grep -q "resumed from .* at step 4" "$dir/$name.log"
  compare "$label" "$dir/ref" "$dir/$name" 1e-5
}
# Saved at 2 ranks after step 4 (uneven pieces in the checkpoint), resumed at 1 rank.
resumed saved "deepseek_v4 saved at dp_shard 2, resumed at 1 rank"
"$hp" ckpt inspect "$dir/saved" > "$dir/inspect.txt"
grep -A2 "^model.layers.0.attn_hc.scale  f32 \[3\]" "$dir/inspect.txt" | grep -q "offsets \[2\] *sizes \[1\]"
grep -A1 "^model.hc_head.hc_scale  f32 \[1\]" "$dir/inspect.txt" | grep -q "offsets \[0\] *sizes \[1\]"
# Expert parallelism: each MoE layer's 4 experts over 2 ranks (2 each), the hash-routed layers
# (tid2eid) included; saved at ep 2, resumed without EP (dp_shard 2).
run ep2 2 --set parallel.ep=2
compare "deepseek_v4 ep 2 vs 1 rank" "$dir/ref" "$dir/ep2" 1e-5
RESUME_RANKS=2 resumed ep_saved "deepseek_v4 saved at ep 2, resumed without EP" --set parallel.ep=2
"$hp" ckpt inspect "$dir/ep_saved" > "$dir/inspect_ep.txt"
grep -q "^model.layers.0.mlp.experts.3.down_proj.weight  f32 \[32, 16\]" "$dir/inspect_ep.txt"
# Tensor parallelism (models/deepseek_v4_tp.cpp): attention by query heads and whole output groups
# (4 heads, o_groups 2 → 2 heads / 1 group per rank), the shared K = V head and compressors
# replicated, vocabulary-parallel ends; saved at tp 2, resumed at tp 1.
run tp2 2 --set parallel.tp=2
compare "deepseek_v4 tp 2 vs 1 rank" "$dir/ref" "$dir/tp2" 1e-5
resumed tp_saved "deepseek_v4 saved at tp 2, resumed at 1 rank" --set parallel.tp=2
# o_groups 2 cannot split over 4 ranks without mixing ranks' heads inside a group.
expect_error tp4 4 "parallel.tp = 4 must divide num_attention_heads (4) and o_groups (2)" \
  --set parallel.tp=4
# Pipeline parallelism: pp 4 (a layer a stage: stage 1's hash-routed layer reads the micro-batch's
# token ids though its input is the previous stage's streams) and pp 2 × dp_shard 2 equal 1 rank
# with the same micro-batching.
accum=(--set training.grad_accum=4)
run ref_mb4 1 "${accum[@]}"
run pp4 4 "${accum[@]}" --set parallel.pp=4
compare "deepseek_v4 pp 4 vs 1 rank" "$dir/ref_mb4" "$dir/pp4" 1e-5
run ref_mb2 1 --set training.grad_accum=2
run pp2_dp2 4 --set training.grad_accum=2 --set parallel.pp=2
compare "deepseek_v4 pp 2 × dp_shard 2 vs 1 rank" "$dir/ref_mb2" "$dir/pp2_dp2" 1e-5
echo "train_v4: all checks passed"
