// One-lane "SIMD" arch over float or double, with exact libm math. It is both the portable kernel
// path (float, for CPUs without AVX2) and the f64 path that gradient checks run on (double).
// Included only by the portable ISA TU (see simd_arch.h for why).
#pragma once

#include <cmath>
#include <cstdint>

namespace hp::kernels {

template <class T>
struct ScalarArch {
  static constexpr int W = 1;
  static constexpr bool kExactMath = true;  // math functions come from libm
  using V = T;
  using M = bool;
  static V load(const T* p) { return *p; }
  static void store(T* p, V v) { *p = v; }
  static V set1(T x) { return x; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  // NaN in b propagates (same operand order as the x86 max/min instructions).
  static V max(V a, V b) { return a > b ? a : b; }
  static V min(V a, V b) { return a < b ? a : b; }
  static V sqrt(V a) { return std::sqrt(a); }
  static V abs(V a) { return std::fabs(a); }
  static V neg(V a) { return -a; }
  static M lt(V a, V b) { return a < b; }
  static M gt(V a, V b) { return a > b; }
  static M ge(V a, V b) { return a >= b; }
  static M eq(V a, V b) { return a == b; }
  static M isnan(V a) { return a != a; }
  static V select(M m, V a, V b) { return m ? a : b; }
  static V exp(V x) { return std::exp(x); }
  static V log(V x) { return std::log(x); }
  static V tanh(V x) { return std::tanh(x); }
  static V norm_cdf(V x) { return T(0.5) * std::erfc(-x * T(0.70710678118654752440)); }  // Φ(x)
  static T hsum(V v) { return v; }
  static T hmax(V v) { return v; }
};

}  // namespace hp::kernels
