// The f32 row kernels of rope() (rope.h), one per ISA (rope_impl.h). No tensor types here: the ISA
// translation units include this header.
#pragma once

#include <cstdint>

namespace hp::kernels::detail {

// One row [2·half]: y = rotate(x) by the row's cos c and sin s [half] (s negated for the inverse),
// pairs (i, i + half), or (2i, 2i + 1) when interleaved. Bitwise the same on every ISA.
void rope_row_scalar(const float* x, const float* c, const float* s, float* y, int64_t half,
                     bool interleaved);
void rope_row_avx2(const float* x, const float* c, const float* s, float* y, int64_t half,
                   bool interleaved);
void rope_row_avx512(const float* x, const float* c, const float* s, float* y, int64_t half,
                     bool interleaved);

}  // namespace hp::kernels::detail
