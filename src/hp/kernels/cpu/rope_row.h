// The f32 row kernel of rope() (rope.h), one per ISA (rope_impl.h), as a kernel family of
// registry.h. No tensor types here: the ISA translation units include this header.
#pragma once

#include <cstdint>

#include "hp/kernels/registry.h"

namespace hp::kernels {

struct RopeTable {
  // One row [2·half]: y = rotate(x) by the row's cos c and sin s [half] (s negated for the
  // inverse), pairs (i, i + half), or (2i, 2i + 1) when interleaved. Bitwise the same on every ISA.
  void (*row)(const float* x, const float* c, const float* s, float* y, int64_t half,
              bool interleaved);
};
HP_KERNEL_FAMILY(RopeTable);

}  // namespace hp::kernels
