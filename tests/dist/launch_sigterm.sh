#!/usr/bin/env bash
# SIGTERM to the `hp launch` process (not its group) of a running 2-rank `hp train`: the ranks
# save a checkpoint and stop, no rank outlives the launcher, and it exits 143 (128 + SIGTERM), all
# within ~20 s. Usage: launch_sigterm.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cleanup() {
  for p in $(ranks); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 64, layers: 2, heads: 4, kv_heads: 2, intermediate: 128, vocab: 259}
data: {path: $dir/corpus.txt}
training: {steps: 1000000, batch_size: 4, seq_len: 32, mixed_precision: f32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
run: {dir: $dir/run}
YAML
"$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" > "$dir/log.txt" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  if [ -s "$dir/run/metrics.jsonl" ] && [ "$(wc -l < "$dir/run/metrics.jsonl")" -ge 2 ]; then break; fi
  sleep 0.05
done
test "$(ranks | wc -l)" -eq 2
kill -TERM "$launcher"
t0=$(date +%s)
for _ in $(seq 200); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
rc=0
wait "$launcher" || rc=$?
s=$(($(date +%s) - t0))
cat "$dir/log.txt"
left=$(ranks)
echo "launcher exit $rc after ${s} s; ranks left: ${left:-none}"
test -z "$left"
test "$rc" -eq 143
test "$s" -le 20
grep -Eq "stopped (at|during) step" "$dir/log.txt"
test -f "$dir/run/latest"
"$hp" ckpt inspect "$dir/run" > "$dir/inspect.txt"  # not piped into grep -q: SIGPIPE + pipefail
grep "^step " "$dir/inspect.txt"
