#!/usr/bin/env bash
# training.fusion at 2 ranks (FSDP, parameters resharded after forward: the fused norms save the
# gathered weights through the saved-tensor hooks and get them re-gathered in backward): auto trains
# bitwise like none, lazy within rounding of none; HP_FUSION overrides the key; a bad value is an
# error naming it.
# Usage: train_fusion.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 8, batch_size: 4, seq_len: 32, seed: 3, mixed_precision: f32}
parallel: {dp_shard: -1, fsdp: {reshard_after_forward: true}}
metrics: {log_every: 1, progress: lines}
checkpoint: {save_final: false}
YAML
for m in none auto lazy; do run "$m" 2 --set training.fusion=$m; done
cmp <(losses "$dir/none") <(losses "$dir/auto")
[ "$(losses "$dir/auto" | wc -l)" -eq 8 ]
echo "2 ranks, fusion auto: 8 steps, bitwise equal to none"
compare "2 ranks, fusion lazy vs none" "$dir/none" "$dir/lazy" 1e-4
HP_FUSION=lazy run env_lazy 2 --set training.fusion=none
grep -q "HP_FUSION overrides training.fusion: none" "$dir/env_lazy.log"
cmp <(losses "$dir/lazy") <(losses "$dir/env_lazy")
echo "HP_FUSION=lazy overrides training.fusion: none (bitwise the lazy run)"
expect_error bad 1 "training.fusion" --set training.fusion=fast
