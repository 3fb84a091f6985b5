#!/usr/bin/env bash
# hp train across rank counts (FSDP + DCP): one uninterrupted 1-rank run against a run saved at 4
# ranks, resumed at 3 ranks, saved again and finished at 1 rank. The losses of every step must agree
# (f32 params and reductions: sums of shards in a different order, so to 1e-5 relative, not bitwise),
# metrics are written once (one line per step), and the checkpoint reloads anywhere.
# Usage: train_reshard.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
# vocab 259 and intermediate 72: dims that do not divide by 4 (or 3) ranks.
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 72, vocab: 259}
data: {path: $dir/corpus.txt}
optimizer: {name: OPT, lr: 0.01}
training: {steps: 10, batch_size: 12, seq_len: 32, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
for opt in adamw muon; do
  sed "s/OPT/$opt/" "$dir/run.yaml" > "$dir/$opt.yaml"
  "$hp" train "$dir/$opt.yaml" --set run.dir="$dir/ref_$opt" > "$dir/ref_$opt.log"
  "$hp" launch -n 4 -- "$hp" train "$dir/$opt.yaml" --set run.dir="$dir/re_$opt" --stop-after 4 \
    > "$dir/a_$opt.log"
  grep -q "stopped at step 4" "$dir/a_$opt.log"
  "$hp" ckpt inspect "$dir/re_$opt" > "$dir/inspect.txt"
  grep -q "model.embed_tokens.weight" "$dir/inspect.txt"
  "$hp" launch -n 3 -- "$hp" train "$dir/$opt.yaml" --set run.dir="$dir/re_$opt" --resume auto \
    --stop-after 3 > "$dir/b_$opt.log"
  grep -q "resumed from .* at step 4" "$dir/b_$opt.log"
  "$hp" train "$dir/$opt.yaml" --set run.dir="$dir/re_$opt" --resume auto > "$dir/c_$opt.log"
  grep -q "resumed from .* at step 7" "$dir/c_$opt.log"
  test "$(losses "$dir/re_$opt" | wc -l)" -eq 10  # written once per step, never per rank
  paste <(losses "$dir/ref_$opt") <(losses "$dir/re_$opt") | awk -v opt=$opt '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > worst) worst = r
      printf "%s step %d: 1 rank %s, 4→3→1 ranks %s\n", opt, NR, $1, $2 }
    END { printf "%s: worst relative difference %.3g\n", opt, worst; exit !(NR == 10 && worst < 1e-5) }'
done
