#!/usr/bin/env bash
# Chaos harness: trains the bundled configs (tiny: --set overrides only, the same ones in every
# segment of a run) through CYCLES random interruptions, each followed by `hp train --resume auto`,
# sometimes at another layout, then checks that every interrupted chain ends with the losses of an
# uninterrupted run (bitwise where the layout never changed, within 1e-5 relative otherwise) and
# that nothing is left behind (processes, held locks, .partial dirs, offload files, MPI temp dirs).
# Interruptions: SIGKILL / SIGTERM of one rank or of `hp launch` after a random step, during
# start-up, or while a checkpoint is being written (a step-*.partial dir exists; every chain saves
# every step); a full disk (the run dir on a small tmpfs; skipped with a note where mount fails); a
# corrupted checkpoint, the one a resume would take (a byte flipped in, or truncation of, a rank
# file: --resume auto must skip it). docs/ARCHITECTURE.md section 8 describes the checks.
# One line per cycle; exit 0 only if every check holds. The seed and every choice are printed:
# `tools/chaos.sh CYCLES SEED` replays each cycle's draws (where timings leave a chain at another
# step, that chain's later choices follow its state).
# Usage: tools/chaos.sh CYCLES [SEED]   (HP=path/to/hp, default build/hp; CHAOS_KEEP=1 keeps the
# scratch directory for a post-mortem; CHAOS_FAULTS="corrupt disk" draws from those faults only:
# rank launcher save disk corrupt)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Lead our own session: every process a cycle starts (launcher, mpirun, ranks) stays in it, which
# is how the leftover check finds them without touching other users' runs.
if [ "$(ps -o sid= -p $$ | tr -d ' ')" != "$$" ]; then exec setsid bash "$0" "$@"; fi
cycles=${1:?usage: tools/chaos.sh CYCLES [SEED]}
seed=${2:-$(( $(date +%s%N) / 1000 % 1000000 ))}
hp=$(realpath "${HP:-$root/build/hp}")
cd "$root" || exit 2
scratch=$(mktemp -d /tmp/hp-chaos.XXXXXX)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done
  [ -n "${CHAOS_KEEP:-}" ] && echo "scratch kept: $scratch" || rm -rf "$scratch"
}
trap cleanup EXIT
# Open MPI's session dirs go here, so the end can check that none is left.
export TMPDIR=$scratch/tmp HP_NUM_THREADS=1 HP_COMM_TIMEOUT_S=60
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$TMPDIR" "$scratch/ref"
# bash reports each killed background job ("Killed ..."): the faults are meant, so not that line.
exec 2> >(grep --line-buffered -v ': line [0-9]*: *[0-9]* Killed ' >&2)
# Every segment gets the final step count (never changed between segments). Few steps: f32
# rounding differences between layouts grow with training (default.yaml, 1 rank vs dp2 x tp2:
# 2e-6 relative by step 16, 9e-6 by step 21 of a 24-step run).
steps=16
deadline_s=180 # a segment running longer than this hangs
echo "chaos: seed $seed, $cycles cycles, $hp (replay: tools/chaos.sh $cycles $seed)"

# --- seeded choices (a 31-bit LCG in this shell, never $RANDOM in subshells) ---
rng=$seed
pick() {  # pick N: R = a number in [0, N), from the high bits of two LCG steps
  local hi
  rng=$(( (rng * 1103515245 + 12345) % 2147483648 ))
  hi=$((rng >> 16))
  rng=$(( (rng * 1103515245 + 12345) % 2147483648 ))
  R=$(( (hi << 15 | rng >> 16) % $1 ))
}
choose() {  # choose WORD...: C = one of the words
  pick $#
  local a=("$@")
  C=${a[$R]}
}

# --- configs and the layouts each trains at: name:ranks:tp:cp:ep:pp:class ---
# bench_* are `hp bench` configs (their runs are measurements); the rest train as they are. A chain
# changes layout only within its first layout's class: layouts of one class compute the same
# losses up to rounding. Others differ by design: MoE's load-balancing loss is computed on each
# rank's own tokens (a data split changes it: ~7e-4 after a few steps), and MXFP8 quantizes in
# 32-element blocks that run along each rank's tokens (weight gradients) and shards (tp).
declare -A layouts=(
  [default]="1:1:1:1:1:1:a dp2:2:1:1:1:1:a tp2:2:2:1:1:1:a cp2:2:1:2:1:1:a dp2tp2:4:2:1:1:1:a"
  [validation]="1:1:1:1:1:1:a dp2:2:1:1:1:1:a tp2:2:2:1:1:1:a cp2:2:1:2:1:1:a"
  [mxfp8]="1:1:1:1:1:1:a dp2:2:1:1:1:1:b tp2:2:2:1:1:1:c"
  [moe]="1:1:1:1:1:1:a tp2:2:2:1:1:1:a dp2:2:1:1:1:1:b ep2:2:1:1:2:1:b"
  [pipeline]="pp2:2:1:1:1:2:a pp1:1:1:1:1:1:a pp2dp2:4:1:1:1:2:a"
)
configs=(default validation mxfp8 moe pipeline)
# Tiny runs: small widths, short sequences, a checkpoint every step, a line per step.
base_sets() {  # base_sets CONFIG: the overrides of every run of CONFIG (reference included)
  S=(--set "training.steps=$steps" --set training.batch_size=8 --set training.seq_len=32
     --set model.hidden=64 --set model.intermediate=128 --set training.sample_tokens=0
     --set lr_scheduler.warmup_steps=2 --set metrics.log_every=1 --set checkpoint.interval=1
     --set metrics.progress=lines)
  case $1 in
    # auto picks bf16 on CPUs with native bf16, whose layouts then differ by more than 1e-5.
    default) S+=(--set training.mixed_precision=f32) ;;
    moe) S+=(--set model.moe_intermediate=64) ;;
    validation) S+=(--set eval.interval=5 --set eval.steps=2) ;;
    pipeline) S+=(--set parallel.pipeline.microbatches=4) ;;
  esac
}
layout_sets() {  # layout_sets LAYOUT: L = the parallel.* overrides, N = its rank count
  local f
  IFS=: read -r -a f <<< "$1"
  N=${f[1]}
  L=(--set parallel.tp="${f[2]}" --set parallel.cp="${f[3]}" --set parallel.ep="${f[4]}"
     --set parallel.pp="${f[5]}")
}

fails=0
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); cycle_ok=0; }

# The processes of this harness's session other than the harness itself and its helpers, and any
# process (a daemon that left the session) whose command line names the scratch dir.
session_procs() {
  {
    ps -eo pid=,sid=,comm= | awk -v sid=$$ -v me=$$ '$2 == sid && $1 != me &&
      $3 !~ /^(ps|awk|bash|sleep|sed|grep|cat|sort|head|tail|pgrep)$/ { print $1 ":" $3 }'
    local p
    for p in $(pgrep -f -- "$scratch/(run|ref)"); do
      [ "$(ps -o sid= -p "$p" | tr -d ' ')" = $$ ] || echo "$p:$(cat /proc/"$p"/comm 2>/dev/null)"
    done
  } | sort -u
}
# Ranks of the segment training into $1: "pid rank" lines.
ranks_of() {
  local p
  for p in $(pgrep -f -- "run.dir=$1( |$)"); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = hp ] || continue
    local r
    r=$(tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && echo "$p $r"
  done
}
last_step() {  # the newest step line of $1/metrics.jsonl (0 before the first)
  local s
  s=$(grep -o '"step":[0-9]*' "$1/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
  echo "${s:-0}"
}
# Waits for the segment (launcher $1) to end; RC its status, HUNG=1 after $deadline_s.
await() {
  local t0=$SECONDS
  HUNG=0
  while kill -0 "$1" 2>/dev/null; do
    if ((SECONDS - t0 > deadline_s)); then
      HUNG=1
      local p
      for p in $(session_procs | cut -d: -f1); do kill -KILL "$p" 2>/dev/null; done
    fi
    sleep 0.1
  done
  wait "$1" 2>/dev/null
  RC=$?
}
# After a segment: no process of it may outlive it (mpirun tears the job down within seconds; a
# launcher killed outright leaves mpirun to stop the ranks, which save first).
check_no_procs() {
  local left
  for _ in $(seq 300); do
    left=$(session_procs)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "processes left after the segment: $(echo $left)"
  for p in $(echo "$left" | cut -d: -f1); do kill -KILL "$p" 2>/dev/null; done
}
# What a run dir may not hold once its segment has ended: a held lock; at chain end also staging
# dirs and scratch files.
check_run_dir() {  # check_run_dir RUN_DIR final
  if [ -f "$1/.lock" ] && ! flock -n "$1/.lock" true; then fail "$1/.lock is still held"; fi
  [ "$2" = final ] || return 0
  local junk
  junk=$(cd "$1" && find . -name '*.partial' -o -path ./offload -prune -o -name '*.tmp' -print)
  junk+=$(find "$1/offload" -type f 2>/dev/null)
  [ -z "$junk" ] || fail "left in the run dir: $(echo $junk)"
}

# --- faults ---
kill_rank() {  # kill_rank RUN SIG: a random rank of the run gets SIG; F describes it
  local pr=() rr line
  for _ in $(seq 200); do
    mapfile -t pr < <(ranks_of "$1")
    ((${#pr[@]} > 0)) && break
    sleep 0.02
  done
  ((${#pr[@]} > 0)) || { F+=" (no rank found)"; return; }
  pick ${#pr[@]}
  line=${pr[$R]}
  rr=${line#* }
  kill -"$2" "${line%% *}" 2>/dev/null
  F+=" rank $rr"
}
at_moment() {  # at_moment RUN STEP LAUNCHER DELAY: until metrics.jsonl reaches STEP or the run
  # ends; with a DELAY (seconds), that long after the start instead
  if [ -n "$4" ]; then sleep "$4"; return; fi
  while kill -0 "$3" 2>/dev/null && (($(last_step "$1") < $2)); do sleep 0.02; done
}
# The steps of RUN's complete checkpoints (metadata.json written), oldest first.
ckpt_steps() {
  local m d
  for m in "$1"/step-[0-9]*/metadata.json; do
    [ -e "$m" ] || continue
    d=${m%/metadata.json}
    d=${d##*/step-}
    [[ $d == *[!0-9]* ]] || echo $((10#$d))
  done | sort -n
}
newest_ckpt() { local s; s=$(ckpt_steps "$1" | tail -1); echo "${s:-0}"; }
complete_ckpts() { ckpt_steps "$1" | wc -l; }
# The step --resume auto must continue from: `latest`'s when complete (it names the run's own
# timeline: a save killed between publishing step-N and updating `latest` leaves N unused, safely),
# else the newest complete checkpoint.
resume_point() {
  local l
  l=$(cat "$1/latest" 2>/dev/null)
  if [[ $l =~ ^step-([0-9]+)$ ]] && [ -f "$1/$l/metadata.json" ]; then
    echo $((10#${BASH_REMATCH[1]}))
  else
    newest_ckpt "$1"
  fi
}
corrupt_newest() {  # corrupt_newest RUN: damages the checkpoint a resume would take; F says how
  local d files f size hdr off
  d=$(printf 'step-%08d' "$(resume_point "$1")")
  mapfile -t files < <(cd "$1/$d" && ls rank-*.safetensors)
  pick ${#files[@]}
  f=$1/$d/${files[$R]}
  size=$(stat -c %s "$f")
  # The data region starts after the 8-byte header length and the JSON header.
  hdr=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
  pick 2
  if ((R == 0)); then
    pick $((size - 8 - hdr))
    off=$((8 + hdr + R))
    local byte
    byte=$(od -An -t u1 -j "$off" -N 1 "$f" | tr -d ' ')
    printf "$(printf '\\%03o' $((byte ^ 0xff)))" |
      dd of="$f" bs=1 seek="$off" conv=notrunc status=none
    F="corrupt: flipped byte $off of $d/${files[$R]:-${f##*/}}"
  else
    pick $((size - 8 - hdr))
    truncate -s $((8 + hdr + R)) "$f"
    F="corrupt: truncated $d/${f##*/} to $((8 + hdr + R)) of $size bytes"
  fi
  CORRUPTED=$d
}
# full_disk_begin RUN: RUN moves onto a tmpfs with room for less than one more checkpoint. Staging
# dirs of killed saves stay behind (their step's re-save would free their room first; the next
# save would delete them anyway).
full_disk_begin() {
  local used ck e
  used=$(du -sk --exclude='*.partial' "$1" | cut -f1)
  ck=$(du -sk "$1/$(printf 'step-%08d' "$(newest_ckpt "$1")")" | cut -f1)
  mv "$1" "$1.disk"
  mkdir -p "$1"
  if ! mount -t tmpfs -o mode=755,size=$((2 * used + 4 * ck + 1024))k tmpfs "$1" 2>/dev/null; then
    rmdir "$1"
    mv "$1.disk" "$1"
    return 1
  fi
  mounts+=("$1")
  for e in "$1.disk"/* "$1.disk"/.lock; do
    [[ -e $e && $e != *.partial ]] && cp -a "$e" "$1/"
  done
  # Then shrink it to what the copy takes (tmpfs's own count) plus half a checkpoint.
  used=$(df -k --output=used "$1" | tail -1 | tr -d ' ')
  mount -o remount,size=$((used + ck / 2))k "$1"
}
full_disk_end() {  # the tmpfs's contents back onto the disk
  local back=$1.back
  mkdir -p "$back"
  cp -a "$1/." "$back/"
  umount "$1"
  unset 'mounts[-1]'
  rmdir "$1"
  rm -rf "$1.disk"
  mv "$back" "$1"
}

# --- a segment: hp launch at LAYOUT into the chain's run dir, resuming if it has started ---
start_segment() {  # start_segment CONFIG LAYOUT RUN LOG RESUME(0/1): PID = the launcher
  base_sets "$1"
  layout_sets "$2"
  local extra=("${chain_sets[@]}")
  ((${5})) && extra+=(--resume auto)
  "$hp" launch -n "$N" -- "$hp" train "configs/$1.yaml" "${S[@]}" "${L[@]}" "${extra[@]}" \
    --set "run.dir=$3" > "$4" 2>&1 &
  PID=$!
}

# The uninterrupted reference of CONFIG at LAYOUT (cached): REF = its run dir.
reference() {
  REF=$scratch/ref/$1-${2%%:*}
  [ -f "$REF/metrics.jsonl" ] && [ -f "$REF.ok" ] && return 0
  local chain_sets=()
  start_segment "$1" "$2" "$REF" "$REF.log" 0
  await "$PID"
  if ((RC != 0 || HUNG)); then
    fail "reference run $1 at ${2%%:*} failed (rc $RC): $(tail -n 3 "$REF.log" | tr '\n' ' ')"
    return 1
  fi
  touch "$REF.ok"
}
# compare_losses REF RUN EXACT: every step's loss (and eval_loss) of RUN equals REF's.
compare_losses() {
  local a b
  a=$(sed -n 's/.*"\(loss\|eval_loss\)":\([^,}]*\).*"step":\([0-9]*\).*/\3 \1 \2/p' "$1/metrics.jsonl")
  b=$(sed -n 's/.*"\(loss\|eval_loss\)":\([^,}]*\).*"step":\([0-9]*\).*/\3 \1 \2/p' "$2/metrics.jsonl")
  paste -d' ' <(echo "$a") <(echo "$b") | awk -v exact="$3" -v want="$(echo "$a" | wc -l)" '
    NF != 6 || $1 != $4 || $2 != $5 { bad = "step " $1 "/" $4 " " $2 "/" $5 " differ in kind"; exit }
    { if (exact) { if ($3 != $6) { bad = "step " $1 " " $2 " " $3 " vs " $6; exit } }
      else { d = $3 - $6; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3)
             if (r > worst) worst = r
             if (!(r <= 1e-5)) { bad = "step " $1 " " $2 " " $3 " vs " $6 " (rel " r ")"; exit } }
      n++ }
    END { if (bad == "" && n != want) bad = n " of " want " records"
          if (bad != "") { print bad; exit 1 }
          printf "%d records %s\n", n, exact ? "bitwise equal" : sprintf("worst rel %.2g", worst) }'
}

# --- the chains ---
declare -A chain_run chain_fails0 chain_left chain_layouts chain_first chain_extra
cycle=0
finish_chain() {  # finish_chain CONFIG: train to the end at a random layout, compare, check
  local c=$1 run=${chain_run[$1]} lay
  class_layout "$c"
  lay=$C
  local chain_sets
  read -r -a chain_sets <<< "${chain_extra[$c]}"
  start_segment "$c" "$lay" "$run" "$run.final.log" 1
  await "$PID"
  check_no_procs
  chain_layouts[$c]+=" ${lay%%:*}"
  local path=${chain_layouts[$c]# }
  local msg
  if ((HUNG)); then
    fail "the final segment hung"
  elif ((RC != 0)); then
    fail "the final segment failed (rc $RC): $(grep -m2 '\[' "$run.final.log" | tr '\n' ' ')"
  else
    local exact=1
    for l in $path; do [ "$l" = "${chain_first[$c]}" ] || exact=0; done
    local first
    for l in ${layouts[$c]}; do [ "${l%%:*}" = "${chain_first[$c]}" ] && first=$l; done
    if reference "$c" "$first"; then
      msg=$(compare_losses "$REF" "$run" "$exact") || fail "losses vs uninterrupted: $msg"
    fi
  fi
  check_run_dir "$run" final
  echo "  chain $c done [$path] (${chain_extra[$c]:-no extra keys}): ${msg:-see above}"
  # A failed chain's run dir and logs stay for a post-mortem (CHAOS_KEEP=1 keeps the scratch dir).
  ((fails > chain_fails0[$c])) || rm -rf "$run" "$run".*.log
  unset "chain_run[$c]"
}

new_chain() {  # new_chain CONFIG: a fresh run dir, a first layout and the chain's fixed keys
  local c=$1 ls_
  read -r -a ls_ <<< "${layouts[$c]}"
  choose "${ls_[@]}"
  chain_first[$c]=${C%%:*}
  chain_layouts[$c]=""
  chain_run[$c]=$scratch/run-$c-$cycle
  chain_fails0[$c]=$fails
  pick 3
  chain_left[$c]=$((R + 1))
  local e=""
  choose 0 1 2 3 # checkpoint.keep: 0 keeps all
  e+="--set checkpoint.keep=$C"
  pick 3
  ((R == 0)) && e+=" --set offload.optimizer=disk"
  chain_extra[$c]=$e
}

layout_by_name() {  # layout_by_name CONFIG NAME: C = the layout spec
  for l in ${layouts[$1]}; do [ "${l%%:*}" = "$2" ] && C=$l; done
}
class_layout() {  # class_layout CONFIG: C = a random layout of the class of the chain's first
  local l same=()
  layout_by_name "$1" "${chain_first[$1]}"
  for l in ${layouts[$1]}; do [ "${l##*:}" = "${C##*:}" ] && same+=("$l"); done
  choose "${same[@]}"
}

run_cycle() {
  local c lay run fault sig started want
  # Each cycle draws from its own stream (seed, cycle): a replay repeats every cycle's choices even
  # where timings ended some chain sooner (the choices of a chain's segments depend on its state).
  rng=$(( (seed * 7919 + cycle * 104729) % 2147483648 ))
  pick 2
  choose "${configs[@]}"
  c=$C
  [ -n "${chain_run[$c]:-}" ] || new_chain "$c"
  run=${chain_run[$c]}
  started=0
  [ -f "$run/metrics.jsonl" ] && started=1
  # Half the resumes keep the previous layout; the first segment uses the chain's first.
  if ((started)); then
    pick 2
    if ((R == 0)); then class_layout "$c"; else layout_by_name "$c" "${chain_layouts[$c]##* }"; fi
  else
    layout_by_name "$c" "${chain_first[$c]}"
  fi
  lay=$C
  # shellcheck disable=SC2086 # CHAOS_FAULTS is a list of words
  choose ${CHAOS_FAULTS:-rank rank launcher save save disk corrupt}
  fault=$C
  choose KILL TERM
  sig=$C
  # When: after a random step of this segment, or (one in six) a random moment of its start-up,
  # resume included, before it trains a step.
  local early=0
  [ "$fault" = rank ] || [ "$fault" = launcher ] && { pick 6; ((R == 0)) && early=1; }
  local have
  have=$(complete_ckpts "$run")
  # A corruption needs an older checkpoint to fall back to; a full disk a checkpoint to copy.
  [ "$fault" = corrupt ] && { ((started && have >= 2)) || fault=rank; }
  [ "$fault" = disk ] && { ((started && have >= 1)) || fault=save; }
  local done_ before
  done_=$(last_step "$run")
  ((done_ >= steps - 4)) && fault=none  # too close to the end: the chain finishes here
  before=$(resume_point "$run")
  pick $((steps - 4 - done_ > 0 ? steps - 4 - done_ : 1))
  want=$((done_ + 1 + R))
  F=""
  CORRUPTED=""
  local chain_sets
  read -r -a chain_sets <<< "${chain_extra[$c]}"
  local log=$run.$cycle.log disk=0
  case $fault in
    corrupt) corrupt_newest "$run" ;;
    disk)
      if full_disk_begin "$run"; then
        disk=1
        F="full disk (tmpfs)"
      else
        F="full disk skipped: mount failed; SIG$sig rank at step $want instead"
        fault=rank
      fi ;;
  esac
  cycle_ok=1
  start_segment "$c" "$lay" "$run" "$log" "$started"
  local launcher=$PID
  local delay=""
  if ((early)); then
    pick 2000
    delay=$((R / 1000)).$(printf %03d $((R % 1000)))
  fi
  local when="after step $want"
  ((early)) && when="${R} ms into start-up"
  case $fault in
    rank) at_moment "$run" "$want" "$launcher" "$delay"; F+="SIG$sig $when:"; kill_rank "$run" "$sig" ;;
    launcher)
      at_moment "$run" "$want" "$launcher" "$delay"
      kill -"$sig" "$launcher" 2>/dev/null
      F="SIG$sig hp launch $when" ;;
    save)
      at_moment "$run" "$want" "$launcher" "$delay"
      local caught=""
      for _ in $(seq 1000); do
        compgen -G "$run/step-*.partial" > /dev/null && { caught=1; break; }
        kill -0 "$launcher" 2>/dev/null || break
        sleep 0.002
      done
      F="SIG$sig mid-save $when${caught:+ (step-*.partial present)}"
      [ -n "$caught" ] || F+=" (save window missed)"
      F+=":"
      kill_rank "$run" "$sig" ;;
    corrupt) F+="; SIG$sig rank $when:"; at_moment "$run" "$want" "$launcher" "$delay"; kill_rank "$run" "$sig" ;;
    none) F="no fault (the chain is at its end)" ;;
  esac
  await "$launcher"
  check_no_procs
  ((disk)) && full_disk_end "$run"
  chain_layouts[$c]+=" ${lay%%:*}"
  local resumed
  resumed=$(sed -n 's/^resumed from .*step-0*\([0-9][0-9]*\) at step.*/\1/p' "$log" | head -1)
  ((HUNG)) && fail "segment hung (> ${deadline_s}s)"
  # Outcome checks.
  if [ -n "$CORRUPTED" ]; then
    grep -q "skipping checkpoint .*$CORRUPTED" "$log" || fail "corrupted $CORRUPTED was not skipped"
    [ -n "$resumed" ] && ((resumed != 10#${CORRUPTED#step-})) ||
      fail "resumed from ${resumed:-nothing}, the corrupted $CORRUPTED"
  elif ((started)) && ! ((RC != 0 && (early || disk))) || [ -n "$resumed" ]; then
    # (A segment stopped during start-up may end before it says where it resumed, and so may one
    # on a full disk: the offload file fills while the checkpoint loads.)
    # (No checkpoint yet: the killed first segment saved none, and this one starts afresh.)
    [ "${resumed:-0}" = "$before" ] || fail "resumed from ${resumed:-nothing}, not from $before"
  fi
  case $fault in
    none) ((RC == 0)) || fail "the segment failed (rc $RC)" ;;
    disk)
      if ((RC == 0)); then
        fail "the run finished on a full disk"
      elif compgen -G "$run/step-*.partial" > /dev/null; then
        fail "the failed save left its staging dir"
      elif ! grep -q 'No space left on device' "$log"; then
        fail "no error naming the full disk (rc $RC): $(tail -n 2 "$log" | tr '\n' ' ')"
      fi ;;
    *)
      # SIGTERM saves and stops: exit 143 with a checkpoint of the last step done, no staging dir.
      if [ "$sig" = TERM ] && ((RC != 0)); then
        ((RC == 143)) || fail "SIGTERM: rc $RC, not 143: $(grep -m2 '\[' "$log" | tr '\n' ' ')"
        # (Stopped during start-up, before the handlers, a rank ends as the signal says: no save,
        # and an older killed save's staging dir stays for the next save to remove.)
        if grep -q '^stopped' "$log"; then
          (($(newest_ckpt "$run") == $(last_step "$run"))) ||
            fail "SIGTERM: newest checkpoint $(newest_ckpt "$run"), last step $(last_step "$run")"
          ! compgen -G "$run/step-*.partial" > /dev/null || fail "SIGTERM left a staging dir"
        fi
      fi
      ;;
  esac
  check_run_dir "$run" segment
  [ -f "$run/metrics.jsonl" ] || started=0
  printf 'cycle %d/%d: %s at %s: %s -> rc %d, resumed from %s, now at step %s: %s\n' \
    "$cycle" "$cycles" "$c" "${lay%%:*}" "$F" "$RC" "${resumed:-(fresh)}" "$(last_step "$run")" \
    "$( ((cycle_ok)) && echo ok || echo FAILED)"
  ((cycle_ok)) || { echo "  log $log:"; tail -n 8 "$log" | sed 's/^/    /'; }
  chain_left[$c]=$((chain_left[$c] - 1))
  # A chain ends after its cycles, or when a segment ran to the end by itself.
  if ((chain_left[$c] <= 0)) || (($(last_step "$run") >= steps)); then finish_chain "$c"; fi
}

t0=$SECONDS
for cycle in $(seq 1 "$cycles"); do run_cycle; done
for c in "${configs[@]}"; do [ -n "${chain_run[$c]:-}" ] && finish_chain "$c"; done
left=$(find "$TMPDIR" -mindepth 1 -maxdepth 1 2>/dev/null)
[ -z "$left" ] || { echo "FAIL: left in TMPDIR: $(echo $left)"; fails=$((fails + 1)); }
left=$(session_procs)
[ -z "$left" ] || { echo "FAIL: processes left: $(echo $left)"; fails=$((fails + 1)); }
echo "chaos: $cycles cycles, seed $seed, $((SECONDS - t0)) s, $fails failures"
((fails == 0))
