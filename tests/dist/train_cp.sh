#!/usr/bin/env bash
# hp train with context parallelism (the parallelize step's CP): at cp 2 every step's loss equals
# the 1-rank run's within 1e-5 relative (f32; attention blocks merged by log-sum-exp, gradients
# summed in another order), by ring attention and by Ulysses, with tp 2 × cp 2 at 4 ranks, with a
# DeepSeek-V3 (MLA + MoE) fixture, a Qwen3-MoE, recompute and packed documents (bf16: within 2%);
# a run saved at cp 2
# resumes at cp 1 with the
# uninterrupted run's losses; bad degrees and lengths fail naming the numbers.
# Usage: train_cp.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259,
        tie_embeddings: true}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 8, batch_size: 4, seq_len: 48, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
run ref 1
for method in ring alltoall; do
  run "cp_$method" 2 --set parallel.cp=2 --set parallel.cp_method=$method
  grep -q "cp 2 ($method, 24 of 48 tokens per rank)" "$dir/cp_$method.log"
  compare "cp 2 ($method) vs 1 rank" "$dir/ref" "$dir/cp_$method" 1e-5
done
# Packed documents (a verse per document; attention within it, positions restarting): the rows'
# document ids reach ring and Ulysses attention.
docs=(--set 'data.doc_separator="\n"' --set data.document_mask=true)
run ref_docs 1 "${docs[@]}"
for method in ring alltoall; do
  run "cp_docs_$method" 2 "${docs[@]}" --set parallel.cp=2 --set parallel.cp_method=$method
  compare "cp 2 ($method) vs 1 rank with packed documents" "$dir/ref_docs" "$dir/cp_docs_$method" 1e-5
done
run cp_recompute 2 --set parallel.cp=2 --set recompute.mode=full
compare "cp 2 with recompute full vs 1 rank" "$dir/ref" "$dir/cp_recompute" 1e-5
# bf16 compute (attention in f32 either way; bf16 roundings of other sums may differ) and a
# Qwen3-MoE with its router loss (from the global expert counts; within 1e-3: the one-rank forward
# also routes each row's last token, whose logits the loss never uses — L + 1 rows a row vs L).
run ref_bf16 1 --set training.mixed_precision=bf16
run cp_bf16 2 --set training.mixed_precision=bf16 --set parallel.cp=2
compare "cp 2 vs 1 rank (bf16)" "$dir/ref_bf16" "$dir/cp_bf16" 0.02
moe=(--set model.arch=qwen3_moe --set model.experts=4 --set model.experts_per_token=2)
run ref_moe 1 "${moe[@]}"
run cp_moe 2 "${moe[@]}" --set parallel.cp=2
compare "cp 2 vs 1 rank (qwen3_moe)" "$dir/ref_moe" "$dir/cp_moe" 1e-3
# cp 2 × dp_shard 2 (FSDP over all 4 ranks) and tp 2 × cp 2 (with sequence parallelism).
run cp_dp 4 --set parallel.cp=2
compare "dp_shard 2 × cp 2 vs 1 rank" "$dir/ref" "$dir/cp_dp" 1e-5
run cp_tp 4 --set parallel.cp=2 --set parallel.tp=2
grep -q "cp 2 (ring, 24 of 48 tokens per rank) × tp 2 (sequence parallel)" "$dir/cp_tp.log"
compare "cp 2 × tp 2 vs 1 rank" "$dir/ref" "$dir/cp_tp" 1e-5
# MLA with MoE layers: the DeepSeek-V3 fixture.
use_deepseek_v3
run ref_mla 1
run cp_mla 2 --set parallel.cp=2
compare "deepseek_v3 (MLA + MoE) cp 2 vs 1 rank" "$dir/ref_mla" "$dir/cp_mla" 1e-5
cp "$dir/base.yaml" "$dir/run.yaml"
# Saved at cp 2 after step 4, resumed at cp 1.
run saved 2 --set parallel.cp=2 --stop-after 4
grep -q "stopped at step 4" "$dir/saved.log"
run saved 1 --resume auto
grep -q "resumed from .* at step 4" "$dir/saved.log"
compare "saved at cp 2, resumed at cp 1" "$dir/ref" "$dir/saved" 1e-5
# Bad input: degrees that do not multiply to the world; a length that does not split into 2·cp
# chunks; heads that Ulysses cannot split.
expect_error bad_world 2 \
  "parallel.dp_replicate × parallel.cp × parallel.tp = 1 × 2 × 2 does not divide the world size 2" \
  --set parallel.cp=2 --set parallel.tp=2
expect_error bad_len 2 "training.seq_len: 42 does not split into 2 × parallel.cp = 4 equal chunks" \
  --set parallel.cp=2 --set training.seq_len=42
expect_error bad_heads 3 "parallel.cp: 3 does not divide the query heads per tp rank" \
  --set parallel.cp=3 --set parallel.cp_method=alltoall
