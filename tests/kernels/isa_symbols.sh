#!/usr/bin/env bash
# Every ISA translation unit (*_avx2.cpp, *_avx512.cpp, *_sse42.cpp: built with -m flags) must keep
# its code in its own namespace. A weak symbol outside it (an inline function or a std template
# such as std::vector<uint16_t>::~vector instantiated there) is merged by the linker with the copies
# from other objects, and the linker may keep the one compiled with AVX-512 instructions for every
# caller: a SIGILL on a CPU without them (docs/ARCHITECTURE.md "SIMD").
# Usage: isa_symbols.sh OBJECT... (any list; arguments may hold ';'-separated lists, as CMake's
# $<TARGET_OBJECTS:...> gives). Fails naming each offending object and symbol.
set -euo pipefail
status=0
checked=0
for arg in "$@"; do
  IFS=';' read -r -a objs <<< "$arg"
  for o in "${objs[@]}"; do
    case "$o" in *_avx2.cpp.o|*_avx512.cpp.o|*_sse42.cpp.o) ;; *) continue ;; esac
    checked=$((checked + 1))
    # W / V: weak symbols defined here. The personality-routine reference is the compiler's own.
    bad=$(nm -C "$o" | awk '$2 == "W" || $2 == "V"' | cut -d' ' -f3- |
          grep -v -e '::avx2::' -e '::avx512::' -e '^DW\.ref\.__gxx_personality_v0$' || true)
    if [ -n "$bad" ]; then
      echo "[isa_symbols] $o defines weak symbols outside its ISA namespace:"
      echo "$bad" | sed 's/^/  /'
      status=1
    fi
  done
done
if [ "$checked" -eq 0 ]; then
  echo "[isa_symbols] no ISA objects (*_avx2 / *_avx512 / *_sse42.cpp.o) among the arguments"
  exit 1
fi
echo "[isa_symbols] $checked ISA objects checked"
exit $status
