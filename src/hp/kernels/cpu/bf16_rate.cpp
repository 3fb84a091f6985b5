// The bf16 dot-product probe (bf16_rate.h): vdpbf16ps (16 lanes × 2 products) against
// vfmadd231ps (16 lanes × 1 product), each on 12 independent register accumulators, enough to
// cover either instruction's latency, so the loops measure issue rate. Compiled for AVX-512 by
// function attributes; called only where the CPU has AVX512_BF16.
#include "hp/kernels/cpu/bf16_rate.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace hp::kernels {
namespace {

// (Not _mm512_reduce_add_ps: g++ 12 warns about its own header there.)
__attribute__((target("avx512f"))) float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float t = 0;
  for (float x : lanes) t += x;
  return t;
}

// The two instructions timed, each with its operand type and constant operands.
struct Fma {
  using In = __m512;
  __attribute__((target("avx512f"))) static In x() { return _mm512_set1_ps(0.999f); }
  __attribute__((target("avx512f"))) static In y() { return _mm512_set1_ps(1e-3f); }
  __attribute__((target("avx512f"))) static __m512 step(__m512 a, In x, In y) {
    return _mm512_fmadd_ps(x, a, y);
  }
};
struct Dot {
  using In = __m512bh;
  __attribute__((target("avx512f,avx512bf16"))) static In x() {
    return (__m512bh)_mm512_set1_epi16(0x3c00);
  }
  __attribute__((target("avx512f,avx512bf16"))) static In y() {
    return (__m512bh)_mm512_set1_epi16(0x3f80);
  }
  __attribute__((target("avx512f,avx512bf16"))) static __m512 step(__m512 a, In x, In y) {
    return _mm512_dpbf16_ps(a, x, y);
  }
};

#define HP_ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

// n rounds of 12 independent Op::step chains, each accumulator its own register.
template <class Op>
__attribute__((target("avx512f,avx512bf16"))) float rate_loop(int64_t n) {
#define HP_DECL(i) __m512 a##i = _mm512_set1_ps(float(i));
  HP_ACC12(HP_DECL)
#undef HP_DECL
  const typename Op::In x = Op::x(), y = Op::y();
  for (int64_t k = 0; k < n; ++k) {
#define HP_STEP(i) a##i = Op::step(a##i, x, y);
    HP_ACC12(HP_STEP)
#undef HP_STEP
  }
  __m512 s = _mm512_setzero_ps();
#define HP_SUM(i) s = _mm512_add_ps(s, a##i);
  HP_ACC12(HP_SUM)
#undef HP_SUM
  return lane_sum(s);
}
#undef HP_ACC12

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  volatile float sink = f();
  (void)sink;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double measure_bf16_dot_rate() {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512f")) return 0.0;
  // ~1 ms per loop at FMA rate; best of 5 alternating pairs so both see the same load.
  constexpr int64_t kIters = 200000;
  double fma = 1e30, dot = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    fma = std::min(fma, seconds([] { return rate_loop<Fma>(kIters); }));
    dot = std::min(dot, seconds([] { return rate_loop<Dot>(kIters); }));
  }
  return 2.0 * fma / dot;
}

}  // namespace hp::kernels
