#!/usr/bin/env bash
# hp train with tensor parallelism (the parallelize step): at tp 2 (with sequence parallelism, a
# vocabulary-parallel tied head and loss) every step's loss equals the 1-rank run's — AdamW,
# recompute full and Muon within 1e-5 relative (f32; sums in another order), MXFP8 within 2% (a
# row-parallel weight's quantization blocks restart at its shard's edge), and with packed documents
# (data.document_mask) within 1e-5. A run saved at
# (dp_shard 2, tp 2) resumes at (3, 1), (1, 1) and (1, 2) with the losses of the uninterrupted run.
# Usage: train_tp.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
# vocab 259: the vocabulary splits unevenly over tp 2 (130 + 129) and dp 3.
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259,
        tie_embeddings: true}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 8, batch_size: 12, seq_len: 32, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
for variant in plain muon recompute mxfp8; do
  case $variant in
    plain) args=() tol=1e-5 ;;
    muon) args=(--set optimizer.name=muon) tol=1e-5 ;;
    recompute) args=(--set recompute.mode=full) tol=1e-5 ;;
    mxfp8) args=(--set low_precision.recipe=mxfp8) tol=0.02 ;;
  esac
  run "ref_$variant" 1 "${args[@]}"
  run "tp_$variant" 2 --set parallel.tp=2 "${args[@]}"
  grep -q "tp 2 (sequence parallel), vocabulary-parallel head" "$dir/tp_$variant.log"
  compare "tp 2 vs 1 rank ($variant)" "$dir/ref_$variant" "$dir/tp_$variant" "$tol"
done
# Communication volume: Megatron-SP sends, per layer, one all-gather + one reduce-scatter of the
# [B, T, hidden] activation per block forward and again backward, plus the embedding's
# reduce-scatter and the head's all-gather with their backward: (4·layers + 2) all-reduce
# equivalents of 2·(tp−1)/tp·B·T·hidden·4 bytes, T = seq_len + 1 tokens per row (the norms'
# weight gradients add < 1%).
bytes=$(sed -n 's/.*"tp_comm_bytes":\([0-9]*\).*/\1/p' "$dir/tp_plain/metrics.jsonl" | head -n 1)
awk -v m="$bytes" 'BEGIN { f = (4 * 2 + 2) * 2 * (2 - 1) / 2 * 12 * 33 * 32 * 4
  printf "tensor-parallel bytes per step %d, formula %d (ratio %.4f)\n", m, f, m / f
  exit !(m >= f && m < 1.01 * f) }'
# MoE (attention-only TP, no sequence parallelism) and HSDP × TP (dp_replicate 2 × tp 2).
run ref_moe 1 --set model.arch=qwen3_moe --set model.experts=4 --set model.experts_per_token=2
run tp_moe 2 --set model.arch=qwen3_moe --set model.experts=4 --set model.experts_per_token=2 \
  --set parallel.tp=2
grep -q "tp 2 (no sequence parallelism)" "$dir/tp_moe.log"
compare "tp 2 vs 1 rank (qwen3_moe, attention only)" "$dir/ref_moe" "$dir/tp_moe" 1e-5
# Packed documents (one verse per document; attention within it, positions reset): tp 2 with
# sequence parallelism equals 1 rank.
docs=(--set 'data.doc_separator="\n"' --set data.document_mask=true)
run ref_docs 1 "${docs[@]}"
run tp_docs 2 "${docs[@]}" --set parallel.tp=2
grep -q "packed documents: attention within each document, positions restart" "$dir/tp_docs.log"
compare "tp 2 vs 1 rank (packed documents)" "$dir/ref_docs" "$dir/tp_docs" 1e-5
run hsdp_tp 4 --set parallel.tp=2 --set parallel.dp_replicate=2
compare "dp_replicate 2 × tp 2 vs 1 rank" "$dir/ref_plain" "$dir/hsdp_tp" 1e-5
# parallel.plan: the MLPs replicated (not split) instead of the architecture's colwise / rowwise,
# without sequence parallelism (a replicated block must see the whole sequence).
cp "$dir/run.yaml" "$dir/base.yaml"
cat >> "$dir/run.yaml" <<YAML
parallel: {dp_shard: -1, sequence_parallel: false, fsdp: {reduce_dtype: f32},
           plan: [{modules: ["*mlp.*_proj"], style: replicate}]}
YAML
sed -i '0,/^parallel:/{/^parallel: {dp_shard: -1, fsdp/d}' "$dir/run.yaml"
run tp_plan 2 --set parallel.tp=2
grep -q "tp 2 (no sequence parallelism)" "$dir/tp_plan.log"
compare "tp 2 with the MLPs replicated by parallel.plan" "$dir/ref_plain" "$dir/tp_plan" 1e-5
cp "$dir/base.yaml" "$dir/run.yaml"
# Saved at (dp_shard 2, tp 2) after step 4; resumed at (3, 1), (1, 1), (1, 2).
run saved 4 --set parallel.tp=2 --stop-after 4
grep -q "stopped at step 4" "$dir/saved.log"
"$hp" ckpt inspect "$dir/saved" > "$dir/inspect.txt"
grep -q "model.layers.0.mlp.down_proj.weight" "$dir/inspect.txt"
# The (2, 2) checkpoint exports to a Hugging Face directory that loads (hp model info).
"$hp" ckpt export-hf "$dir/saved" "$dir/hf" > "$dir/export.log"
"$hp" model info "$dir/hf" > "$dir/info.txt"
grep -q "Qwen3ForCausalLM" "$dir/info.txt"
# Degrees that do not multiply to the world: an error naming all five numbers, on every rank.
if "$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" --set run.dir="$dir/bad" \
    --set parallel.tp=2 --set parallel.dp_shard=2 > "$dir/bad.log" 2>&1; then
  echo "expected a world-size error"; exit 1
fi
grep -q "parallel.dp_replicate × parallel.dp_shard × parallel.cp × parallel.tp = 1 × 2 × 1 × 2 must equal the world size 2" "$dir/bad.log"
for layout in "3 1" "1 1" "1 2"; do
  set -- $layout
  name="resumed_$1_$2"
  mkdir -p "$dir/$name"
  cp -r "$dir/saved/." "$dir/$name/"
  run "$name" $(($1 * $2)) --set parallel.tp="$2" --resume auto
  grep -q "resumed from .* at step 4" "$dir/$name.log"
  compare "saved at (2, 2), resumed at ($1, $2)" "$dir/ref_plain" "$dir/$name" 1e-5
done
