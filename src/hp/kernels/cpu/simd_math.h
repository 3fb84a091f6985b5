// Vector transcendental functions over a SIMD primitive set P (see simd_arch.h).
//
// Accuracy, measured against libm in double by tests/kernels/elementwise_kernel_test.cpp:
//   exp  — Cephes polynomial after Cody–Waite reduction, ≤ 2 ulp; NaN/±Inf handled, exp(x) = 0
//          below -103.97 (results in the subnormal range are within 2^-149 absolute).
//   log  — Cephes polynomial on the mantissa in [sqrt(1/2), sqrt(2)), ≤ 2 ulp; 0 → -Inf, x<0 → NaN.
//   tanh — odd Taylor polynomial for |x| < 0.4, (1 - e)/(1 + e) with e = exp(-2|x|) above, ≤ 4 ulp.
//   exp2 — Cephes exp2f polynomial on [-127, 127], relative error ~2e-7, flushes below 2^-126
//          (the attention softmax's base-2 exponent).
//   Φ    — the normal CDF from Abramowitz & Stegun 7.1.26 (erfc), absolute error ≤ 0.75e-7,
//          relative on the negative side (the erf form of GELU and its derivative).
// These are templates on P, so each ISA TU instantiates its own copy (distinct mangled names).
#pragma once

// Always inlined: the fusion engine's chains apply 8 vectors of an op at a time inside one large
// routine (fusion/routines_impl.h), where GCC's inline budget ran out and exp / log / tanh became
// out-of-line calls — each spilling every live vector register (all caller-saved), which made a
// chain of x·sigmoid(x) 1.7x the eager silu kernel in cache. Inlined, the chain is at the
// kernel's speed.
#define HP_MATH_INLINE __attribute__((always_inline)) inline

namespace hp::kernels {

// exp(r) - style polynomial of exp after the Cody–Waite reduction x = n ln2 + r: returns p, sets n.
template <class P>
HP_MATH_INLINE typename P::V exp_reduced(typename P::V xc, typename P::V* n_out) {
  using V = typename P::V;
  V n = P::round(P::mul(xc, P::set1(1.44269504088896341f)));
  V r = P::fma(n, P::set1(-0.693359375f), xc);
  r = P::fma(n, P::set1(2.12194440e-4f), r);
  V p = P::set1(1.9875691500e-4f);
  p = P::fma(p, r, P::set1(1.3981999507e-3f));
  p = P::fma(p, r, P::set1(8.3334519073e-3f));
  p = P::fma(p, r, P::set1(4.1665795894e-2f));
  p = P::fma(p, r, P::set1(1.6666665459e-1f));
  p = P::fma(p, r, P::set1(5.0000001201e-1f));
  *n_out = n;
  return P::fma(p, P::mul(r, r), P::add(r, P::set1(1.0f)));
}

template <class P>
HP_MATH_INLINE typename P::V vec_exp(typename P::V x) {
  using V = typename P::V;
  // Fast path, every lane in (-86, 88) (NaN is not): no clamp, no special values, and 2^n in one
  // factor. There n is in [-124, 127] and p = e^r in [0.70, 1.42], so p·2^n is a normal float and
  // both this product and the two-factor one below are exact: the same bits as the general path
  // (which any lane outside the range takes, for the whole vector).
  constexpr int kAll = (1 << P::W) - 1;
  if ((P::mask_bits(P::lt_mask(P::set1(-86.0f), x)) & P::mask_bits(P::lt_mask(x, P::set1(88.0f)))) ==
      kAll) {
    V n;
    const V p = exp_reduced<P>(x, &n);
    return P::ldexp(p, n);
  }
  const V hi = P::set1(88.72283935546875f), lo = P::set1(-104.0f);
  V xc = P::min(hi, P::max(lo, x));  // operand order keeps NaN
  V n;
  const V p = exp_reduced<P>(xc, &n);
  // 2^n split in two factors so that n in [-150, 128] never leaves the normal exponent range.
  V n1 = P::round(P::mul(n, P::set1(0.5f)));
  V n2 = P::sub(n, n1);
  V y = P::mul(P::mul(p, P::pow2i(n1)), P::pow2i(n2));
  y = P::select(P::gt(x, hi), P::set1(__builtin_inff()), y);
  // Below -150·ln 2 the result rounds to 0; the clamped polynomial would give 2^-149 (so exp(-Inf)
  // was 1.4e-45 and x·exp(-x²) terms leaked into GELU's backward at huge |x|).
  return P::select(P::lt(x, P::set1(-103.972077f)), P::set1(0.0f), y);
}

template <class P>
HP_MATH_INLINE typename P::V vec_log(typename P::V x) {
  using V = typename P::V;
  // Denormal inputs: scale into the normal range first.
  auto tiny = P::lt(x, P::set1(1.17549435e-38f));
  V xs = P::select(tiny, P::mul(x, P::set1(8388608.0f)), x);
  V e;
  V m = P::frexp1(xs, &e);  // xs = m * 2^e, m in [1, 2)
  e = P::select(tiny, P::sub(e, P::set1(23.0f)), e);
  auto big = P::gt(m, P::set1(1.41421356237f));
  m = P::select(big, P::mul(m, P::set1(0.5f)), m);
  e = P::select(big, P::add(e, P::set1(1.0f)), e);
  V f = P::sub(m, P::set1(1.0f));
  V z = P::mul(f, f);
  V y = P::set1(7.0376836292e-2f);
  y = P::fma(y, f, P::set1(-1.1514610310e-1f));
  y = P::fma(y, f, P::set1(1.1676998740e-1f));
  y = P::fma(y, f, P::set1(-1.2420140846e-1f));
  y = P::fma(y, f, P::set1(1.4249322787e-1f));
  y = P::fma(y, f, P::set1(-1.6668057665e-1f));
  y = P::fma(y, f, P::set1(2.0000714765e-1f));
  y = P::fma(y, f, P::set1(-2.4999993993e-1f));
  y = P::fma(y, f, P::set1(3.3333331174e-1f));
  y = P::mul(P::mul(y, f), z);
  y = P::fma(e, P::set1(-2.12194440e-4f), y);
  y = P::fma(z, P::set1(-0.5f), y);
  V r = P::add(f, y);
  r = P::fma(e, P::set1(0.693359375f), r);
  // Special values: x == 0 → -Inf, x < 0 or NaN → NaN, +Inf → +Inf.
  r = P::select(P::eq(x, P::set1(0.0f)), P::set1(-__builtin_inff()), r);
  r = P::select(P::lt(x, P::set1(0.0f)), P::set1(__builtin_nanf("")), r);
  r = P::select(P::eq(x, P::set1(__builtin_inff())), x, r);
  return P::select(P::isnan(x), x, r);
}

template <class P>
HP_MATH_INLINE typename P::V vec_tanh(typename P::V x) {
  using V = typename P::V;
  V a = P::abs(x);
  // Small |x|: x + x^3 * poly(x^2) from the Taylor series (terms to x^13).
  V z = P::mul(x, x);
  V p = P::set1(-0.00359212803657248101f);  // x^13 coefficient
  p = P::fma(p, z, P::set1(0.00886323552990219657f));
  p = P::fma(p, z, P::set1(-0.0218694885361552028f));
  p = P::fma(p, z, P::set1(0.0539682539682539683f));
  p = P::fma(p, z, P::set1(-0.133333333333333333f));
  p = P::fma(p, z, P::set1(0.333333333333333333f));
  V small = P::sub(x, P::mul(P::mul(p, z), x));
  // Large |x|: (1 - e) / (1 + e), e = exp(-2|x|), sign restored.
  V e = vec_exp<P>(P::mul(a, P::set1(-2.0f)));
  V t = P::div(P::sub(P::set1(1.0f), e), P::add(P::set1(1.0f), e));
  V large = P::select(P::lt(x, P::set1(0.0f)), P::neg(t), t);
  V r = P::select(P::lt(a, P::set1(0.4f)), small, large);
  return P::select(P::isnan(x), x, r);
}

// Φ(x) = erfc(-x/√2) / 2, the standard normal CDF (GELU's x·Φ(x) and its derivative), from A&S
// 7.1.26: erfc(a) = t·P(t)·e^(-a²), t = 1 / (1 + 0.3275911·a), a = |x|/√2, absolute error ≤ 1.5e-7.
// With h = erfc(a) / 2, Φ = h for x < 0 and 1 - h above: no cancellation against 1 on the negative
// side (the erf form 1 + erf(x/√2) rounded to 0 below x ≈ -5.7; h is within 4% down to x = -13),
// and no sign or NaN fix-up (NaN propagates; x·Φ(x) is NaN at -Inf, as 0.5·x·(1 + erf) was).
// -a² is clamped to -87: e^(-87) = 2^-125.5, so n ≥ -126 and 2^n is a normal factor (pow2i's
// range); below x ≈ -13.2, |x·Φ(x)| < 1e-37 (measured over x in [-1e30, -13]).
template <class P>
HP_MATH_INLINE typename P::V vec_norm_cdf(typename P::V x) {
  using V = typename P::V;
  const V a = P::abs(P::mul(x, P::set1(0.70710678118654752f)));
  const V t = P::div(P::set1(1.0f), P::fma(a, P::set1(0.3275911f), P::set1(1.0f)));
  V p = P::set1(0.5f * 1.061405429f);  // A&S's coefficients halved (exact): p·t = P(t)·t / 2
  p = P::fma(p, t, P::set1(0.5f * -1.453152027f));
  p = P::fma(p, t, P::set1(0.5f * 1.421413741f));
  p = P::fma(p, t, P::set1(0.5f * -0.284496736f));
  p = P::fma(p, t, P::set1(0.5f * 0.254829592f));
  p = P::mul(p, t);
  V n;
  const V e = exp_reduced<P>(P::max(P::set1(-87.0f), P::neg(P::mul(a, a))), &n);  // keeps NaN
  const V h = P::mul(p, P::ldexp(e, n));
  return P::select(P::lt(x, P::set1(0.0f)), h, P::sub(P::set1(1.0f), h));
}

// exp2 for the attention softmax (scores kept in base-2 units) on [-127, 127], NaN propagating:
// 2^x = 2^n · 2^f with n = round(x), f in [-0.5, 0.5] and 2^f from Cephes' degree-6 minimax
// polynomial (exp2f.c), relative error about 2e-7 (attention_test checks the whole range).
// x <= -127 (and -Inf) give 2^-127 · p → exponent field 0, i.e. 0: results below 2^-126 flush to 0.
template <class P>
typename P::V vec_exp2(typename P::V x) {
  using V = typename P::V;
  x = P::max(P::set1(-127.0f), x);  // operand order keeps NaN
  x = P::min(P::set1(127.0f), x);
  const V n = P::round(x);
  const V f = P::sub(x, n);
  V p = P::set1(1.535336188319500e-4f);
  p = P::fma(p, f, P::set1(1.339887440266574e-3f));
  p = P::fma(p, f, P::set1(9.618437357674640e-3f));
  p = P::fma(p, f, P::set1(5.550332471162809e-2f));
  p = P::fma(p, f, P::set1(2.402264791363012e-1f));
  p = P::fma(p, f, P::set1(6.931472028550421e-1f));
  p = P::fma(p, f, P::set1(1.0f));
  return P::mul(p, P::pow2i(n));
}

}  // namespace hp::kernels
