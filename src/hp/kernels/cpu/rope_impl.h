// Body of an ISA translation unit for the f32 rotary row kernel (rope_row.h).
// Included once per ISA after defining HP_ISA. Each lane computes a·c − b·s and b·c + a·s with
// separate products (the AVX TUs compile with -ffp-contract=off, CMakeLists.txt), so every ISA
// gives the portable loop's bits.
#pragma once

#include "hp/kernels/cpu/rope_row.h"
#include "hp/kernels/cpu/simd_arch.h"

namespace hp::kernels::HP_ISA {

struct RopeRow {
  using A = Arch;
  using V = A::V;
  static constexpr int W = A::W;

  static void rotate(const float* x, const float* c, const float* s, float* y, int64_t half,
                     bool interleaved) {
    int64_t i = 0;
    if (interleaved) {  // pairs (2i, 2i + 1): GPT-J's layout, rare; the plain loop
      for (; i < half; ++i) {
        const float a = x[2 * i], b = x[2 * i + 1];
        y[2 * i] = a * c[i] - b * s[i];
        y[2 * i + 1] = b * c[i] + a * s[i];
      }
      return;
    }
    // Pairs (i, i + half): both halves are contiguous vectors.
    for (; i + W <= half; i += W) {
      const V a = A::load(x + i), b = A::load(x + i + half), cv = A::load(c + i),
              sv = A::load(s + i);
      A::store(y + i, A::sub(A::mul(a, cv), A::mul(b, sv)));
      A::store(y + i + half, A::add(A::mul(b, cv), A::mul(a, sv)));
    }
    for (; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      y[i] = a * c[i] - b * s[i];
      y[i + half] = b * c[i] + a * s[i];
    }
  }
};

inline constexpr RopeTable kRopeTable{&RopeRow::rotate};

}  // namespace hp::kernels::HP_ISA
