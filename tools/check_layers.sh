#!/usr/bin/env bash
# The layer check (docs/ARCHITECTURE.md §2): every #include "hp/<layer>/..." in src/hp must name
# the file's own layer or one below it in LAYERS. A folder of src/hp that LAYERS does not name
# fails too, so a new layer is placed on purpose. tools/, tests/ and bench/ may include any layer.
# One library is private to one file everywhere: JSON goes through hp/io/json.h, and only
# src/hp/io/json.cpp includes its engine, <nlohmann/...>.
# Usage: bash tools/check_layers.sh [repo root]; exit 0 clean, 1 on a violation (each printed as
# FILE:LINE: <layer> includes <higher layer>, or FILE:LINE: includes nlohmann ...).
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# Bottom to top. core..ops form libhp_base (core, the file formats of io, the tensor engine); the
# rest form libhp.
LAYERS=(core io kernels autograd ops dist fusion nn mx multicore shard offload optim data fsdp
        pipeline checkpoint parallel moe models train)

declare -A rank
for i in "${!LAYERS[@]}"; do rank[${LAYERS[$i]}]=$i; done

bad=0
for dir in src/hp/*/; do
  layer=$(basename "$dir")
  if [[ -z ${rank[$layer]+x} ]]; then
    echo "src/hp/$layer: a folder that LAYERS in tools/check_layers.sh does not place"
    bad=1
  fi
done

while IFS=: read -r file line text; do
  from=${file#src/hp/}
  from=${from%%/*}
  to=${text#*\"hp/}
  to=${to%%/*}
  [[ -z ${rank[$from]+x} ]] && continue  # reported above
  if [[ -z ${rank[$to]+x} ]]; then
    echo "$file:$line: includes an unknown layer '$to'"
    bad=1
  elif ((rank[$to] > rank[$from])); then
    echo "$file:$line: $from includes $to, a higher layer"
    bad=1
  fi
done < <(grep -rnE '^\s*#\s*include\s+"hp/' src/hp --include='*.h' --include='*.cpp' \
           --include='*.inc')

dirs=()
for d in src tools tests bench; do [[ -d $d ]] && dirs+=("$d"); done
while IFS=: read -r file line text; do
  [[ $file == src/hp/io/json.cpp ]] && continue
  echo "$file:$line: includes nlohmann (JSON goes through hp/io/json.h)"
  bad=1
done < <(grep -rnE '^\s*#\s*include\s+<nlohmann/' "${dirs[@]}" --include='*.h' --include='*.cpp' \
           --include='*.inc')

if ((bad)); then
  echo "[check_layers] includes run upward (order, bottom to top: ${LAYERS[*]})," \
       "or reach nlohmann past hp/io/json.h"
  exit 1
fi
echo "[check_layers] ${#LAYERS[@]} layers, every include runs downward"
