#!/usr/bin/env bash
# A rank killed (SIGKILL) at an arbitrary moment of a 2-rank run that checkpoints every step — often
# in the middle of a save — must leave the latest complete checkpoint loadable: `hp ckpt inspect`
# reads it and `hp train --resume auto` continues from it on one rank.
# Usage: kill_during_save.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 256, layers: 2, heads: 4, kv_heads: 2, intermediate: 520, vocab: 259}
data: {path: $dir/corpus.txt}
training: {steps: 1000000, batch_size: 4, seq_len: 32, mixed_precision: f32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 1, keep: 2}
run: {dir: $dir/run}
YAML
for delay in 0.13 0.37 0.61; do
  rm -rf "$dir/run"
  "$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" > "$dir/log.txt" 2>&1 &
  launcher=$!
  for _ in $(seq 600); do [ -f "$dir/run/latest" ] && break; sleep 0.05; done
  sleep "$delay"
  victim=$(pgrep -f "train $dir/run.yaml" | while read -r p; do
             [ "$(cat /proc/"$p"/comm 2>/dev/null)" = hp ] && grep -q OMPI_COMM_WORLD_RANK=1 \
               /proc/"$p"/environ 2>/dev/null && echo "$p"; done | head -1)
  test -n "$victim"
  kill -KILL "$victim"
  wait "$launcher" || true  # mpirun ends the job with an error: expected
  ls "$dir/run" | tr "\n" " "; echo
  "$hp" ckpt inspect "$dir/run" > "$dir/inspect.txt"
  step=$(sed -n 's/^step \([0-9]*\).*/\1/p' "$dir/inspect.txt" | head -1)
  test -n "$step"
  "$hp" train "$dir/run.yaml" --resume auto --stop-after 1 \
    --set checkpoint.interval=0 > "$dir/resume.txt" 2>&1
  grep -q "resumed from .* at step $step" "$dir/resume.txt"
  echo "killed rank 1 after ${delay}s: resumed from step $step"
done
