# Sourced by the `hp train` script tests (tests/*/*.sh) with their arguments HP_BINARY REPO_ROOT:
# strict mode, $hp and $root, a scratch $dir removed on exit, and $dir/corpus.txt (the first 300 kB
# of the bundled corpus), and ranks() (this test's live rank processes).
set -euo pipefail
hp=$1
root=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 300000 "$root/data/kjv.txt" > "$dir/corpus.txt"
ranks() {  # the live MPI rank processes of `hp train $dir/run.yaml` (for kill / hang tests)
  pgrep -f "train $dir/run.yaml" | while read -r p; do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = hp ] && grep -qa OMPI_COMM_WORLD_RANK= \
      /proc/"$p"/environ 2>/dev/null && echo "$p"; done || true
}
