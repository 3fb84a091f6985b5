#!/usr/bin/env bash
# Context parallelism in hp train (parallel.cp), measured with real training steps:
#  1. the longest training.seq_len whose step fits a per-rank memory cap (the allocator's peak,
#     metrics.jsonl peak_mem_bytes, parameters + optimizer state + activations) at cp 1, 2 and 4,
#     and the ratio per doubling of cp (target >= 1.8x: activations fall as 1/cp);
#  2. tokens/s at cp 2 vs cp 1 on the same total seq_len, each on all the machine's cores
#     (cp 1: one rank with 2 threads; cp 2: two ranks with 1 thread each).
# Usage, from the repository root: bash bench/cp_scale.sh [HP_BINARY] [CAP_MIB] [SPEED_SEQ_LEN]
# (defaults build/hp, 96, 4096). Prints the CPU and `uptime` before and after.
set -euo pipefail
hp=${1:-build/hp}
cap_mib=${2:-96}
speed_len=${3:-4096}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 2000000 data/kjv.txt > "$dir/corpus.txt"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 128, layers: 2, heads: 4, kv_heads: 2, intermediate: 256, vocab: 259,
        tie_embeddings: true}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.001}
training: {steps: 1, batch_size: 1, seq_len: 512, seed: 0, mixed_precision: f32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "uptime before: $(uptime)"
field() { sed -n "s/.*\"$2\":\([0-9.e+]*\).*/\1/p" "$1/metrics.jsonl" | tail -n 1; }
step() {  # step CP SEQ_LEN [STEPS]: runs, prints "peak_bytes tokens_per_s" of the last step
  local cp=$1 len=$2 steps=${3:-1} name="run_$1_$2_${3:-1}" threads=$((2 / $1 > 0 ? 2 / $1 : 1))
  HP_NUM_THREADS=$threads "$hp" launch -n "$cp" -- "$hp" train "$dir/run.yaml" \
    --set run.dir="$dir/$name" --set parallel.cp="$cp" --set training.seq_len="$len" \
    --set training.steps="$steps" > "$dir/$name.log" 2>&1 || { echo "0 0"; return; }
  echo "$(field "$dir/$name" peak_mem_bytes) $(field "$dir/$name" tokens_per_s)"
}
fits() { local p; p=$(step "$1" "$2" | cut -d' ' -f1); [ "$p" -gt 0 ] && [ "$p" -le $((cap_mib << 20)) ]; }
# Longest multiple of 128 tokens (divisible by 2·cp up to cp 64) that fits: doubling, then
# bisection.
unit=128
longest() {
  local cp=$1 lo=0 hi=4
  while fits "$cp" $((hi * unit)); do lo=$hi; hi=$((hi * 2)); done
  while ((hi - lo > 1)); do
    local mid=$(((lo + hi) / 2))
    if fits "$cp" $((mid * unit)); then lo=$mid; else hi=$mid; fi
  done
  echo $((lo * unit))
}
echo "1. longest seq_len under ${cap_mib} MiB per rank (allocator peak; qwen3 hidden 128, 2 layers, batch 1):"
prev=0
for cp in 1 2 4; do
  len=$(longest "$cp")
  ratio=""
  if ((prev > 0)); then
    ratio=$(awk -v a="$len" -v b="$prev" 'BEGIN { printf "(%.2fx the previous cp)", a / b }')
  fi
  peak=$(step "$cp" "$len" | cut -d' ' -f1)
  echo "  cp $cp: $len tokens, peak $((peak >> 20)) MiB $ratio"
  prev=$len
done
echo "2. tokens/s at seq_len $speed_len (3 steps, last step; same cores):"
read -r _ one <<<"$(step 1 "$speed_len" 3)"
read -r _ two <<<"$(step 2 "$speed_len" 3)"
awk -v a="$one" -v b="$two" 'BEGIN { printf "  cp 1: %.0f tokens/s, cp 2: %.0f tokens/s (cp 2 / cp 1 = %.2fx)\n", a, b, b / a }'
echo "uptime after: $(uptime)"
