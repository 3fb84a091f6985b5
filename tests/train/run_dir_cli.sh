#!/usr/bin/env bash
# hp train's reliability at the command line: zero degrees are config errors (exit 2, no SIGFPE);
# a second run on a busy run.dir fails at once naming the first one's host and pid; a fresh run
# into old checkpoints is refused and --overwrite replaces them; a diverged run exits 3 keeping its
# good checkpoint; metrics on a full disk warn and the run still exits 0.
# Usage: run_dir_cli.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64}
data: {path: $dir/corpus.txt}
training: {steps: 100000, batch_size: 4, seq_len: 32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
run: {dir: $dir/run}
YAML
expect_exit() {  # expect_exit CODE LOG CMD...: CMD exits CODE, its output in LOG
  local want=$1 log=$2 rc=0
  shift 2
  "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" != "$want" ]; then cat "$log"; echo "expected exit $want, got $rc: $*"; exit 1; fi
}
for set in training.grad_accum=0 parallel.dp_replicate=0; do
  expect_exit 2 "$dir/zero.log" "$hp" config show "$dir/run.yaml" --set "$set"
  grep -q "${set%=0}: must be >= 1, got 0" "$dir/zero.log"
  expect_exit 2 "$dir/zero.log" "$hp" train "$dir/run.yaml" --set "$set"
  grep -q "${set%=0}: must be >= 1, got 0" "$dir/zero.log"
done

# Two runs, one run.dir.
"$hp" train "$dir/run.yaml" > "$dir/first.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  if [ -s "$dir/run/metrics.jsonl" ]; then break; fi
  sleep 0.1
done
expect_exit 2 "$dir/second.log" "$hp" train "$dir/run.yaml"
cat "$dir/second.log"
grep -q "host $(hostname) pid $pid, lock $dir/run/.lock" "$dir/second.log"
kill -TERM "$pid"
wait "$pid" || true  # it saves a checkpoint and stops (its exit status is not the point here)
test -f "$dir/run/latest"
lines=$(wc -l < "$dir/run/metrics.jsonl")

# A fresh run into that checkpoint: refused, nothing touched; --overwrite starts over.
expect_exit 2 "$dir/fresh.log" "$hp" train "$dir/run.yaml" --set training.steps=2
grep -q "use --resume auto, or a new run.dir, or --overwrite" "$dir/fresh.log"
test "$(wc -l < "$dir/run/metrics.jsonl")" = "$lines"
expect_exit 2 "$dir/both.log" "$hp" train "$dir/run.yaml" --overwrite --resume auto
expect_exit 0 "$dir/over.log" "$hp" train "$dir/run.yaml" --overwrite --set training.steps=2 \
  --set checkpoint.save_final=true
test "$(ls -d "$dir"/run/step-*)" = "$dir/run/step-00000002"
test "$(wc -l < "$dir/run/metrics.jsonl")" = 2

# Divergence: exit 3, the message names the step and the key, `latest` is from before it.
expect_exit 3 "$dir/div.log" "$hp" train "$dir/run.yaml" --overwrite --set optimizer.lr=1000 \
  --set training.steps=40 --set checkpoint.interval=1
cat "$dir/div.log" | tail -n 3
grep -q "hp train: \[train\] training diverged: stopped at step [0-9]* .*training.max_skipped_steps = 10" \
  "$dir/div.log"
first_bad=$(sed -n 's/^step \([0-9]*\): non-finite gradient norm.*/\1/p' "$dir/div.log" | head -n 1)
test "$(cat "$dir/run/latest")" = "step-$(printf %08d $((first_bad - 1)))"
grep -q '"grad_norm":null' "$dir/run/metrics.jsonl"
expect_exit 3 "$dir/div2.log" "$hp" train "$dir/run.yaml" --resume auto --set optimizer.lr=1000 \
  --set training.steps=40 --set checkpoint.interval=1
if grep -q "internal error" "$dir/div2.log"; then cat "$dir/div2.log"; exit 1; fi

# A full disk under the metrics: warnings, exit 0, and the closing note.
mkdir -p "$dir/full"
ln -s /dev/full "$dir/full/metrics.jsonl"
ln -s /dev/full "$dir/full/config.yaml"
expect_exit 0 "$dir/full.log" "$hp" train "$dir/run.yaml" --set run.dir="$dir/full" \
  --set training.steps=3
grep -q "warning: cannot write $dir/full/config.yaml: No space left on device" "$dir/full.log"
test "$(grep -c "warning: step [0-9]*: cannot write $dir/full/metrics.jsonl" "$dir/full.log")" = 3
grep -q "warning: metrics are incomplete" "$dir/full.log"
echo "run_dir_cli: ok (diverged at step $first_bad)"
