#!/usr/bin/env bash
# hp train under SIGTERM: the run saves a checkpoint and exits 143 (128 + SIGTERM); `--resume auto`
# continues from it to the last step. A SIGTERM in the middle of a long step (many micro-batches)
# stops between micro-batches without applying the step, and the resumed run redoes it bitwise.
# Usage: sigterm_resume.sh HP_BINARY REPO_ROOT
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
rc=0
wait "$pid" || rc=$?
cat "$dir/log.txt"
test "$rc" -eq 143
grep -q "stopped at step" "$dir/log.txt"
step=$(sed -n 's/.*stopped at step \([0-9]*\).*/\1/p' "$dir/log.txt")
test -f "$dir/run/step-$(printf %08d "$step")/metadata.json"
# Resume with the same config (training.steps changes the math) and run two more steps.
"$hp" train "$dir/run.yaml" --resume auto --stop-after 2 > "$dir/log2.txt" 2>&1
cat "$dir/log2.txt"
grep -q "resumed from .* at step $step" "$dir/log2.txt"
grep -Eq "step +$((step + 2))/100000" "$dir/log2.txt"
grep -q "stopped at step $((step + 2))" "$dir/log2.txt"
echo "sigterm_resume: ok (stopped at $step)"

# Mid-step: 3 steps of 400 micro-batches (~2 s each). SIGTERM early in step 2.
loss_of() { sed -n "s/.*\"loss\":\([^,]*\),.*\"step\":$2,.*/\1/p" "$1/metrics.jsonl" | tail -1; }
ga="--set training.batch_size=400 --set training.grad_accum=400 --set training.steps=3"
ga="$ga --set training.sample_tokens=0"
# shellcheck disable=SC2086
"$hp" train "$dir/run.yaml" $ga --set run.dir="$dir/ref" > "$dir/ref.txt" 2>&1
rm -rf "$dir/run"
# shellcheck disable=SC2086
"$hp" train "$dir/run.yaml" $ga > "$dir/log3.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -s "$dir/run/metrics.jsonl" ] && break; sleep 0.05; done
sleep 0.3
t0=$(date +%s%N)
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
cat "$dir/log3.txt"
test "$rc" -eq 143
grep -q "stopped during step 2 (not applied)" "$dir/log3.txt"
test -f "$dir/run/step-00000001/metadata.json"
test "$ms" -lt 1500  # well inside the ~2 s step: it did not wait for the step to end
# shellcheck disable=SC2086
"$hp" train "$dir/run.yaml" $ga --resume auto > "$dir/log4.txt" 2>&1
grep -q "resumed from .* at step 1" "$dir/log4.txt"
for s in 2 3; do
  echo "step $s loss: reference $(loss_of "$dir/ref" $s), resumed $(loss_of "$dir/run" $s)"
  test -n "$(loss_of "$dir/ref" $s)"
  test "$(loss_of "$dir/ref" $s)" = "$(loss_of "$dir/run" $s)"
done
echo "sigterm_resume: mid-step ok (stopped ${ms} ms after SIGTERM)"
