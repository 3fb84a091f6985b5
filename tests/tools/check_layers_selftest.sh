#!/usr/bin/env bash
# tools/check_layers.sh fails on an upward include and on an undeclared folder, and passes a clean
# tree: run on made-up trees in a temporary directory. Usage: check_layers_selftest.sh REPO_ROOT
set -euo pipefail
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/hp/core" "$tmp/src/hp/ops" "$tmp/tools"
cp "$root/tools/check_layers.sh" "$tmp/tools/"
echo '#include "hp/core/tensor.h"' > "$tmp/src/hp/ops/ops.cpp"
bash "$tmp/tools/check_layers.sh" "$tmp" > "$tmp/out" || { cat "$tmp/out"; exit 1; }
echo '#include "hp/ops/ops.h"' > "$tmp/src/hp/core/tensor.cpp"
if bash "$tmp/tools/check_layers.sh" "$tmp" > "$tmp/out"; then
  echo "FAIL: an upward include (core -> ops) passed"; exit 1
fi
grep -q 'src/hp/core/tensor.cpp:1: core includes ops, a higher layer' "$tmp/out" ||
  { echo "FAIL: unexpected report:"; cat "$tmp/out"; exit 1; }
rm "$tmp/src/hp/core/tensor.cpp"
mkdir -p "$tmp/src/hp/newlayer"
if bash "$tmp/tools/check_layers.sh" "$tmp" > "$tmp/out"; then
  echo "FAIL: an undeclared folder passed"; exit 1
fi
grep -q 'src/hp/newlayer: a folder' "$tmp/out" || { cat "$tmp/out"; exit 1; }
echo "check_layers self-test: 3 cases passed"
