// Body of an ISA translation unit for elementwise kernels: instantiates every functor of ew_ops.h
// for this TU's Arch and fills an EwTable. Included once per ISA (ew_scalar.cpp, ew_avx2.cpp,
// ew_avx512.cpp) after defining HP_ISA.
#pragma once

#include "hp/core/dtype.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/simd_arch.h"

namespace hp::kernels::HP_ISA {

template <class Op, int Arity>
void run_f32(float* out, const float* const* in, int64_t n, const float* p) {
  using A = Arch;
  constexpr int W = A::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    if constexpr (Arity == 1)
      A::store(out + i, Op::template apply<A>(A::load(in[0] + i), p));
    else
      A::store(out + i, Op::template apply<A>(A::load(in[0] + i), A::load(in[1] + i), p));
  }
  if (i < n) {
    // Tail through the same vector code on a padded copy, so element results never depend on
    // where a chunk boundary falls (thread-count independence).
    float a[W] = {}, b[W] = {}, o[W];
    const int64_t r = n - i;
    for (int64_t k = 0; k < r; ++k) a[k] = in[0][i + k];
    if constexpr (Arity == 1) {
      A::store(o, Op::template apply<A>(A::load(a), p));
    } else {
      for (int64_t k = 0; k < r; ++k) b[k] = in[1][i + k];
      A::store(o, Op::template apply<A>(A::load(a), A::load(b), p));
    }
    for (int64_t k = 0; k < r; ++k) out[i + k] = o[k];
  }
}

#if defined(__AVX2__)
// Vector converters: 8 values per step; the tail goes through the same code on a padded copy.
// (No calls to core's inline scalar converters here: an out-of-line copy compiled for this ISA
// could be chosen by the linker for callers on other CPUs.)
inline __m256 cvt8_bf16_f32(const uint16_t* in) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

inline __m128i cvt8_f32_bf16(__m256 f) {
  __m256i u = _mm256_castps_si256(f);
  // Round to nearest even: add 0x7FFF + the lsb of the kept half, keep the top 16 bits.
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, qnan, nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

template <class In, class Out, class Step>
inline void convert8(const In* in, Out* out, int64_t n, Step step) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) step(in + i, out + i);
  if (i < n) {
    In a[8] = {};
    Out o[8];
    for (int64_t k = 0; k < n - i; ++k) a[k] = in[i + k];
    step(a, o);
    for (int64_t k = 0; k < n - i; ++k) out[i + k] = o[k];
  }
}

inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  convert8(in, out, n, [](const uint16_t* a, float* o) { _mm256_storeu_ps(o, cvt8_bf16_f32(a)); });
}
inline void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  convert8(in, out, n, [](const float* a, uint16_t* o) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), cvt8_f32_bf16(_mm256_loadu_ps(a)));
  });
}
inline void f16_to_f32(const uint16_t* in, float* out, int64_t n) {
  convert8(in, out, n, [](const uint16_t* a, float* o) {
    _mm256_storeu_ps(o, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))));
  });
}
inline void f32_to_f16(const float* in, uint16_t* out, int64_t n) {
  convert8(in, out, n, [](const float* a, uint16_t* o) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o),
                     _mm256_cvtps_ph(_mm256_loadu_ps(a), _MM_FROUND_TO_NEAREST_INT));
  });
}
#else
inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = hp::bf16_to_f32(in[i]);
}
inline void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = hp::f32_to_bf16(in[i]);
}
inline void f16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = hp::f16_to_f32(in[i]);
}
inline void f32_to_f16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = hp::f32_to_f16(in[i]);
}
#endif

// Sum / max / dot over the first n - n % W elements with 4 vector accumulators, combined in a fixed
// tree; the caller folds the lanes and the < W tail in order.
template <class Combine, class Load>
inline typename Arch::V reduce_vec(int64_t n, float identity, Combine combine, Load load) {
  using A = Arch;
  constexpr int W = A::W;
  typename A::V acc[4] = {A::set1(identity), A::set1(identity), A::set1(identity), A::set1(identity)};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (int k = 0; k < 4; ++k) acc[k] = combine(acc[k], load(i + k * W));
  for (; i + W <= n; i += W) acc[0] = combine(acc[0], load(i));
  return combine(combine(acc[0], acc[1]), combine(acc[2], acc[3]));
}

inline float sum_f32(const float* x, int64_t n) {
  using A = Arch;
  const int64_t main = n - n % A::W;
  float lanes[A::W];
  A::store(lanes, reduce_vec(main, 0.0f, [](A::V a, A::V b) { return A::add(a, b); },
                             [x](int64_t i) { return A::load(x + i); }));
  float r = 0;
  for (int k = 0; k < A::W; ++k) r += lanes[k];
  for (int64_t i = main; i < n; ++i) r += x[i];
  return r;
}

inline float max_f32(const float* x, int64_t n) {
  using A = Arch;
  const int64_t main = n - n % A::W;
  float lanes[A::W];
  // A NaN on either side wins (x86 max alone would drop one of them).
  A::store(lanes, reduce_vec(main, -__builtin_inff(),
                             [](A::V a, A::V b) {
                               return A::select(A::isnan(a), a, A::select(A::isnan(b), b, A::max(a, b)));
                             },
                             [x](int64_t i) { return A::load(x + i); }));
  float r = -__builtin_inff();
  bool nan = false;
  for (int k = 0; k < A::W; ++k) nan |= lanes[k] != lanes[k], r = lanes[k] > r ? lanes[k] : r;
  for (int64_t i = main; i < n; ++i) nan |= x[i] != x[i], r = x[i] > r ? x[i] : r;
  return nan ? __builtin_nanf("") : r;
}

inline float dot_f32(const float* x, const float* y, int64_t n) {
  using A = Arch;
  const int64_t main = n - n % A::W;
  float lanes[A::W];
  A::store(lanes, reduce_vec(main, 0.0f, [](A::V a, A::V b) { return A::add(a, b); },
                             [x, y](int64_t i) { return A::mul(A::load(x + i), A::load(y + i)); }));
  float r = 0;
  for (int k = 0; k < A::W; ++k) r += lanes[k];
  for (int64_t i = main; i < n; ++i) r += x[i] * y[i];
  return r;
}

inline const EwTable& table() {
  static const EwTable t = {
      {
#define HP_EW_ENTRY(e, F, arity) &run_f32<ew::F, arity>,
          HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
      },
      &bf16_to_f32, &f32_to_bf16, &f16_to_f32, &f32_to_f16, &sum_f32, &max_f32, &dot_f32};
  return t;
}

}  // namespace hp::kernels::HP_ISA
