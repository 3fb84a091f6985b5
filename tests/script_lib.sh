# Sourced by the `hp train` script tests (tests/*/*.sh) with their arguments HP_BINARY REPO_ROOT:
# strict mode, $hp and $root, a scratch $dir removed on exit, and $dir/corpus.txt (the first 300 kB
# of the bundled corpus).
set -euo pipefail
hp=$1
root=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 300000 "$root/data/kjv.txt" > "$dir/corpus.txt"
