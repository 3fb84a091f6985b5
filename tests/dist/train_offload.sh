#!/usr/bin/env bash
# HyperOffload at 2 ranks (FSDP shards): optimizer state on the host tier or streamed from the disk
# tier, and activations on the host or disk tier, train with losses bitwise equal to the device tier's over
# 20 steps (AdamW and Muon); a disk
# run saved at step 10 resumes bitwise; an unusable memory.disk_dir and a device budget too small
# end the run with an error naming the path / the budget.
# Usage: train_offload.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 20, batch_size: 4, seq_len: 32, seed: 3}
parallel: {dp_shard: -1}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 10, save_final: false}
YAML
same() {  # same NAME REF RUN: bitwise-equal losses over 20 steps
  if ! cmp -s <(losses "$2") <(losses "$3") || [ "$(losses "$3" | wc -l)" -ne 20 ]; then
    echo "$1: losses differ"; paste <(losses "$2") <(losses "$3"); exit 1
  fi
  echo "$1: 20 steps, bitwise equal"
}
for opt in adamw muon; do
  run "none_$opt" 2 --set optimizer.name=$opt
  run "host_$opt" 2 --set optimizer.name=$opt --set offload.optimizer=host
  run "disk_$opt" 2 --set optimizer.name=$opt --set offload.optimizer=disk
  same "2 ranks, $opt, offload.optimizer host" "$dir/none_$opt" "$dir/host_$opt"
  same "2 ranks, $opt, offload.optimizer disk" "$dir/none_$opt" "$dir/disk_$opt"
done
run all_host 2 --set offload.optimizer=host --set offload.params=host --set offload.grads=host
same "2 ranks, masters, gradients and optimizer state on the host" "$dir/none_adamw" "$dir/all_host"
# Activations of every layer to the host (FSDP's hooks keep its gathered weights; the rest moves).
run act_host 2 --set offload.activations=host --set offload.activations_min_bytes=0
same "2 ranks, activations on the host" "$dir/none_adamw" "$dir/act_host"
grep -q 'activation offload: host for 2 modules' "$dir/act_host.log"
run act_disk 2 --set offload.activations=disk --set offload.activations_min_bytes=0
same "2 ranks, activations on the disk tier" "$dir/none_adamw" "$dir/act_disk"
grep -q 'activation offload: disk for 2 modules' "$dir/act_disk.log"
grep -q '"disk_to_host"' "$dir/act_disk/metrics.jsonl"
grep -q 'moved d>h .* h>disk .* waited' "$dir/act_disk.log"
grep -q '"host_to_disk"' "$dir/disk_adamw/metrics.jsonl"
# Resume a disk run from its step-10 checkpoint (the state went through the disk tier both ways).
"$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" --set run.dir="$dir/resumed" \
  --set offload.optimizer=disk --resume "$dir/disk_adamw/step-00000010" > "$dir/resumed.log"
cmp <(losses "$dir/disk_adamw" | tail -n 10) <(losses "$dir/resumed")
echo "disk offload resumed at step 10: bitwise equal"
# Faults: the disk tier's directory cannot exist (below a file); a budget below one step's needs.
touch "$dir/a_file"
expect_error baddir 2 "$dir/a_file/offload: cannot create" --set offload.optimizer=disk \
  --set memory.disk_dir="$dir/a_file/offload"
expect_error budget 2 "cannot hold even one layer's step" --set memory.device_budget=64KiB
echo "faults reported"
