#!/usr/bin/env bash
# Validation and data mixtures under hp launch: a blend of two sources with a validation set gives
# at 2 ranks (dp_shard, dp_replicate, tp, cp) the 1-rank run's validation losses within 1e-5
# relative; `hp eval` on the saved checkpoint prints the run's last validation line, at 1 and 2
# ranks; eval.split at 2 ranks = 1 rank.
# Usage: train_eval.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
tail -c 100000 "$root/data/kjv.txt" > "$dir/other.txt"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259,
        tie_embeddings: true}
data:
  sources:
    - {path: $dir/corpus.txt, weight: 3}
    - {path: $dir/other.txt, weight: 1}
eval: {data: $dir/other.txt, interval: 4, steps: 3, batch_size: 4}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 8, batch_size: 4, seq_len: 48, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0}
YAML
eval_losses() { sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' "$1/metrics.jsonl"; }
# compare_eval NAME REF RUN: both runs' validation losses (2 passes) agree within 1e-5 relative.
compare_eval() {
  paste <(eval_losses "$2") <(eval_losses "$3") | awk -v name="$1" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > worst) worst = r }
    END { printf "%s: %d passes, worst relative difference %.3g\n", name, NR, worst
          exit !(NR == 2 && worst < 1e-5) }'
}
run ref 1
grep -q "data: tokens trained per source: $dir/corpus.txt" "$dir/ref.log"
grep -q '"source_tokens":\[' "$dir/ref/metrics.jsonl"
run dp 2
compare "blend, dp_shard 2 vs 1 rank" "$dir/ref" "$dir/dp" 1e-5
compare_eval "validation, dp_shard 2 vs 1 rank" "$dir/ref" "$dir/dp"
run hsdp 2 --set parallel.dp_replicate=2
compare_eval "validation, dp_replicate 2 vs 1 rank" "$dir/ref" "$dir/hsdp"
run tp 2 --set parallel.tp=2
compare_eval "validation, tp 2 vs 1 rank" "$dir/ref" "$dir/tp"
run cp 2 --set parallel.cp=2
compare_eval "validation, cp 2 vs 1 rank" "$dir/ref" "$dir/cp"
# hp eval on the final checkpoint prints the run's last validation line (the time aside).
last=$(grep "^eval step 8:" "$dir/ref.log" | sed 's/ (.*//')
for n in 1 2; do
  "$hp" launch -n $n -- "$hp" eval "$dir/run.yaml" --set run.dir="$dir/ref" --resume auto \
    > "$dir/eval$n.log"
  got=$(grep "^eval step 8:" "$dir/eval$n.log" | sed 's/ (.*//')
  echo "hp eval at $n rank(s): $got (run: $last)"
  [ "$got" = "$last" ]
done
# A held-out split: the same documents at any rank count.
sed -i -e 's|^eval:.*|eval: {split: 0.05, interval: 4, steps: 3, batch_size: 4}|' \
  -e '/^  sources:/,/^    - {path: .*other/d' -e "s|^data:$|data: {path: $dir/corpus.txt, doc_separator: \"\\\\n\\\\n\"}|" \
  "$dir/run.yaml"
run split1 1
grep -q "without the held-out ones" "$dir/split1.log"
run split2 2
compare_eval "validation on held-out documents, dp_shard 2 vs 1 rank" "$dir/split1" "$dir/split2"
