#!/usr/bin/env bash
# tools/check_layers.sh fails on an upward include, on an undeclared folder and on nlohmann outside
# io/json.cpp, and passes a clean tree: run on made-up trees in a temporary directory.
# Usage: check_layers_selftest.sh REPO_ROOT
set -euo pipefail
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/hp/core" "$tmp/src/hp/io" "$tmp/src/hp/ops" "$tmp/tools" "$tmp/tests/io"
cp "$root/tools/check_layers.sh" "$tmp/tools/"
echo '#include "hp/core/tensor.h"' > "$tmp/src/hp/ops/ops.cpp"
printf '#include <nlohmann/json.hpp>\n#include "hp/core/error.h"\n' > "$tmp/src/hp/io/json.cpp"
bash "$tmp/tools/check_layers.sh" "$tmp" > "$tmp/out" || { cat "$tmp/out"; exit 1; }
echo '#include <nlohmann/json.hpp>' > "$tmp/tests/io/json_test.cpp"
if bash "$tmp/tools/check_layers.sh" "$tmp" > "$tmp/out"; then
  echo "FAIL: nlohmann included outside io/json.cpp passed"; exit 1
fi
grep -q 'tests/io/json_test.cpp:1: includes nlohmann' "$tmp/out" || { cat "$tmp/out"; exit 1; }
rm "$tmp/tests/io/json_test.cpp"
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
echo "check_layers self-test: 4 cases passed"
