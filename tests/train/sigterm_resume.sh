#!/usr/bin/env bash
# hp train under SIGTERM: the run saves a checkpoint and exits 0; `--resume auto` continues from it
# to the last step. Usage: sigterm_resume.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64}
data: {path: $dir/corpus.txt}
training: {steps: 100000, batch_size: 4, seq_len: 32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
run: {dir: $dir/run}
YAML
"$hp" train "$dir/run.yaml" > "$dir/log.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do
  if [ -s "$dir/run/metrics.jsonl" ] && [ "$(wc -l < "$dir/run/metrics.jsonl")" -ge 3 ]; then break; fi
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"  # set -e: a non-zero exit fails the test
cat "$dir/log.txt"
grep -q "stopped at step" "$dir/log.txt"
step=$(sed -n 's/.*stopped at step \([0-9]*\).*/\1/p' "$dir/log.txt")
test -f "$dir/run/step-$(printf %08d "$step")/metadata.json"
# Resume and finish two more steps.
"$hp" train "$dir/run.yaml" --resume auto --set training.steps=$((step + 2)) > "$dir/log2.txt" 2>&1
cat "$dir/log2.txt"
grep -q "resumed from .* at step $step" "$dir/log2.txt"
grep -q "step $((step + 2))/$((step + 2))" "$dir/log2.txt"
echo "sigterm_resume: ok (stopped at $step)"
