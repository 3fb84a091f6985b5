# Sourced by the `hp train` script tests (tests/*/*.sh) with their arguments HP_BINARY REPO_ROOT:
# strict mode, $hp and $root, a scratch $dir removed on exit, and $dir/corpus.txt (the first 300 kB
# of the bundled corpus), ranks() (this test's live rank processes), and the run helpers below.
set -euo pipefail
# A script killed outright (SIGKILL from ctest's timeout or a killed ctest runs no trap) would leave
# the runs it started in the background training for minutes. So the script leads its own process
# group (setsid without a fork: same PID, same exit status), and a watcher that holds none of its
# output kills that group and the scratch directory once the script is gone.
if [ "$(awk '{print $5}' /proc/$$/stat)" != "$$" ]; then exec setsid bash "$0" "$@"; fi
hp=$1
root=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
( while kill -0 $$ 2>/dev/null; do sleep 1; done; rm -rf "$dir"; kill -KILL -- -$$ ) \
  < /dev/null > /dev/null 2>&1 &
head -c 300000 "$root/data/kjv.txt" > "$dir/corpus.txt"
ranks() {  # the live MPI rank processes of `hp train $dir/run.yaml` (for kill / hang tests)
  pgrep -f "train $dir/run.yaml" | while read -r p; do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = hp ] && grep -qa OMPI_COMM_WORLD_RANK= \
      /proc/"$p"/environ 2>/dev/null && echo "$p"; done || true
}
# losses RUN_DIR: the per-step losses of a run, one per line.
losses() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1/metrics.jsonl"; }
# compare NAME REF RUN TOLERANCE [STEPS]: the runs' per-step losses agree within TOLERANCE
# (relative) over STEPS steps (default 8).
compare() {
  paste <(losses "$2") <(losses "$3") | awk -v name="$1" -v tol="$4" -v steps="${5:-8}" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > worst) worst = r }
    END { printf "%s: %d steps, worst relative difference %.3g\n", name, NR, worst
          exit !(NR == steps && worst < tol) }'
}
# run NAME RANKS ARGS...: hp train $dir/run.yaml on RANKS ranks into $dir/NAME, log $dir/NAME.log.
run() {
  local name=$1 n=$2
  shift 2
  "$hp" launch -n "$n" -- "$hp" train "$dir/run.yaml" --set run.dir="$dir/$name" "$@" \
    > "$dir/$name.log"
}
# pipeline_yaml MODEL TRAINING: run.yaml of the pipeline scripts (f32, adamw, a line per step, no
# checkpoints) with the given model and training mappings.
pipeline_yaml() {
  cat > "$dir/run.yaml" <<YAML
model: $1
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: $2
parallel: {dp_shard: -1, fsdp: {reduce_dtype: f32}}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
}
# matches_ref NAME RANKS ARGS...: run NAME; its losses equal $dir/ref's over 10 steps within 1e-5
# relative (the pipeline scripts' check of every layout against one rank).
matches_ref() { run "$@"; compare "$1 vs 1 rank" "$dir/ref" "$dir/$1" 1e-5 10; }
# expect_error NAME RANKS MESSAGE ARGS...: the run fails, and its stderr or log holds MESSAGE.
expect_error() {
  local name=$1 n=$2 msg=$3
  shift 3
  if run "$name" "$n" "$@" 2> "$dir/$name.err"; then echo "expected an error: $name"; exit 1; fi
  grep -qF "$msg" "$dir/$name.err" "$dir/$name.log" || { cat "$dir/$name.err"; exit 1; }
}
# use_deepseek_v3: run.yaml trains the DeepSeek-V3 fixture (MLA + MoE layers) on token ids below its
# vocabulary (96), its other keys unchanged; the previous run.yaml is kept as base.yaml.
use_deepseek_v3() {
  head -c 20000 "$dir/corpus.txt" |
    perl -e 'binmode STDIN; binmode STDOUT; local $/; print pack("v*", map { $_ % 96 } unpack("C*", <STDIN>))' \
    > "$dir/tokens.u16"
  cp "$dir/run.yaml" "$dir/base.yaml"
  sed -e "s|^model:.*|model: {path: $root/tests/models/fixtures/deepseek_v3}|" -e '/^        [a-z_]/d' \
    -e "s|^data:.*|data: {path: $dir/tokens.u16, format: tokens_u16}|" "$dir/base.yaml" > "$dir/run.yaml"
}
