#!/usr/bin/env bash
# hp data prepare killed (SIGKILL) right after its first resume point: running the same command
# again resumes from that point (the log says so, with the journal's documents and bytes) and
# writes a .bin/.idx byte for byte those of an uninterrupted prepare. --resume-every 64KiB puts a
# resume point after every batch of the small input.
# Usage: prepare_kill_resume.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
# ~13 MB: 3 copies of the bundled corpus, split at blank lines (many documents).
for _ in 1 2 3; do cat "$root/data/kjv.txt"; done > "$dir/in.txt"
args=(--doc-separator '\n\n' --workers 1 --resume-every 64KiB --quiet)
"$hp" data prepare "$dir/in.txt" --out "$dir/ref" "${args[@]}" > "$dir/ref.log"
"$hp" data prepare "$dir/in.txt" --out "$dir/out" "${args[@]}" > "$dir/first.log" 2>&1 &
pid=$!
for _ in $(seq 20000); do [ -f "$dir/out.prepare.json" ] && break; sleep 0.005; done
kill -KILL "$pid"
wait "$pid" || true
test -f "$dir/out.prepare.json"
test ! -f "$dir/out.idx"  # killed before the end: nothing that looks complete
# The resume point the journal holds once the run is dead (the first, or one just after it).
journal=$(cat "$dir/out.prepare.json")
docs=$(echo "$journal" | sed -n 's/.*"documents": *\([0-9]*\).*/\1/p' | head -1)
bytes=$(echo "$journal" | sed -n 's/.*"bytes": *\([0-9]*\).*/\1/p' | head -1)
test -n "$docs" && test -n "$bytes" && test "$bytes" -gt 0
"$hp" data prepare "$dir/in.txt" --out "$dir/out" "${args[@]}" > "$dir/second.log" 2>&1
cat "$dir/second.log"
grep -q "resumed an unfinished prepare: .* ($bytes bytes) of input and $docs documents were already done" \
  "$dir/second.log"
cmp "$dir/ref.bin" "$dir/out.bin"
cmp "$dir/ref.idx" "$dir/out.idx"
test ! -f "$dir/out.prepare.json"
echo "prepare_kill_resume: ok (killed at $bytes bytes, $docs documents)"
