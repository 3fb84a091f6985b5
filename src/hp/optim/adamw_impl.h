// Body of an ISA translation unit for the AdamW update (optim/adamw.h). Included once per ISA
// after defining HP_ISA; adamw_{scalar,avx2,avx512}.cpp register it as their AdamWTable.
//
// Every lane runs the scalar formula's operations one for one — sub, mul, add, sqrt, div, no FMA
// (the TUs compile with -ffp-contract=off, CMakeLists.txt: GCC contracts a·b + c by default) — so
// each ISA's result is bitwise the portable one's, and independent of how the caller splits the
// range.
#pragma once

#include "hp/kernels/cpu/simd_arch.h"
#include "hp/optim/adamw.h"

namespace hp::kernels::HP_ISA {

struct AdamWKernel {
  using A = Arch;
  using V = A::V;
  static constexpr int W = A::W;

  static void update(float* p, const float* g, float* m, float* v, int64_t n,
                     const optim::AdamWStep& s) {
    const V scale = A::set1(s.grad_scale), one_m_b1 = A::set1(s.one_minus_beta1),
            beta2 = A::set1(s.beta2), one_m_b2 = A::set1(s.one_minus_beta2),
            inv_bc2 = A::set1(s.inv_bias_correction2_sqrt), eps = A::set1(s.eps),
            decay = A::set1(s.decay), step = A::set1(s.step_size);
    // One vector of every operand: m += (1-β1)(g - m); v = β2·v + (1-β2)·g²;
    // p = p·decay - step · m / (sqrt(v) / sqrt(1-β2^t) + eps), with g scaled first.
    auto lanes = [&](float* pp, const float* gp, float* mp, float* vp) {
      const V gi = A::mul(A::load(gp), scale), mo = A::load(mp);
      const V mi = A::add(mo, A::mul(one_m_b1, A::sub(gi, mo)));
      const V vi = A::add(A::mul(beta2, A::load(vp)), A::mul(one_m_b2, A::mul(gi, gi)));
      A::store(mp, mi);
      A::store(vp, vi);
      const V denom = A::add(A::mul(A::sqrt(vi), inv_bc2), eps);
      A::store(pp, A::sub(A::mul(A::load(pp), decay), A::mul(step, A::div(mi, denom))));
    };
    int64_t i = 0;
    for (; i + W <= n; i += W) lanes(p + i, g + i, m + i, v + i);
    if (i < n) {
      // The partial last vector through zero-padded copies (padded lanes compute finite junk:
      // v = 0 gives denom = eps).
      float pp[W] = {}, gp[W] = {}, mp[W] = {}, vp[W] = {};
      const int64_t k = n - i;
      for (int64_t j = 0; j < k; ++j)
        pp[j] = p[i + j], gp[j] = g[i + j], mp[j] = m[i + j], vp[j] = v[i + j];
      lanes(pp, gp, mp, vp);
      for (int64_t j = 0; j < k; ++j) p[i + j] = pp[j], m[i + j] = mp[j], v[i + j] = vp[j];
    }
  }
};

inline constexpr optim::AdamWTable kAdamWTable{&AdamWKernel::update};

}  // namespace hp::kernels::HP_ISA
