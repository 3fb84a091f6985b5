#!/usr/bin/env bash
# Installs the Debian packages HyperParallel needs (tools/debian-packages.txt, when missing) and
# builds the `hp` CLI into ./build (the library and the CLI only: the README's test command builds
# the tests, `-DHP_BUILD_BENCH=ON` adds the benchmarks). Usage: bash tools/setup.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t PKGS < tools/debian-packages.txt
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build hp_cli
