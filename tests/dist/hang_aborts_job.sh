#!/usr/bin/env bash
# A rank that hangs (SIGSTOP) in a 2-rank run with HP_COMM_TIMEOUT_S=5: its peer's collective
# times out and the whole job ends (MPI_Abort, not a normal exit blocked in MPI_Finalize) within
# ~20 s, non-zero, with a message naming the rank, the op and the shapes.
# Usage: hang_aborts_job.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
victim=
cleanup() {
  [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
  for p in $(ranks); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 64, layers: 2, heads: 4, kv_heads: 2, intermediate: 128, vocab: 259}
data: {path: $dir/corpus.txt}
training: {steps: 1000000, batch_size: 4, seq_len: 32, mixed_precision: f32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 1, keep: 1}
run: {dir: $dir/run}
YAML
HP_COMM_TIMEOUT_S=5 "$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" > "$dir/log.txt" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -f "$dir/run/latest" ] && break; sleep 0.05; done
test -f "$dir/run/latest"
victim=$(for p in $(ranks); do grep -qa OMPI_COMM_WORLD_RANK=1 /proc/"$p"/environ && echo "$p"; done \
  | head -1)
test -n "$victim"
kill -STOP "$victim"
t0=$(date +%s)
for _ in $(seq 250); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
s=$(($(date +%s) - t0))
if kill -0 "$launcher" 2>/dev/null; then
  cat "$dir/log.txt"
  echo "FAIL: the job still runs ${s} s after rank 1 hung (HP_COMM_TIMEOUT_S=5)"
  kill -KILL "$launcher"
  exit 1
fi
rc=0
wait "$launcher" || rc=$?
cat "$dir/log.txt"
echo "job ended ${s} s after rank 1 hung, exit $rc"
test "$rc" -ne 0
grep -Eq "rank [01] of 2: [a-z_]+\(.*\[[0-9, ]*\].*\) timed out after 5 s" "$dir/log.txt"
grep -q "aborting the job" "$dir/log.txt"
test -z "$(ranks | grep -v "^$victim\$" || true)"  # no other rank left behind
