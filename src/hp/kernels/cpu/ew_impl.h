// Body of an ISA translation unit for elementwise kernels: instantiates every functor of ew_ops.h
// for this TU's Arch and fills an EwTable. Included once per ISA (ew_scalar.cpp, ew_avx2.cpp,
// ew_avx512.cpp) after defining HP_ISA.
#pragma once

#include "hp/core/dtype.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/simd_arch.h"

namespace hp::kernels::HP_ISA {

// How a kernel operand is stored: W lanes read into f32 registers, and written back.
struct F32Lanes {
  using T = float;
  static Arch::V load(const float* p) { return Arch::load(p); }
  static void store(float* p, Arch::V v) { Arch::store(p, v); }
};
// bf16 widened on load (a 16-bit shift: exact) and rounded to nearest even on store, in registers:
// the same bits as converting to an f32 buffer, computing there and converting back.
struct Bf16Lanes {
  using T = uint16_t;
#if defined(__AVX2__)
  static Arch::V load(const uint16_t* p) { return Arch::load_bf16(p); }
  static void store(uint16_t* p, Arch::V v) { Arch::store_bf16(p, v); }
#else
  static float load(const uint16_t* p) { return hp::bf16_to_f32(*p); }
  static void store(uint16_t* p, float v) { *p = hp::f32_to_bf16(v); }
#endif
};

// out[0, n) = Op(in[0][i][, in[1][i]]) with operands stored as In and the result as Out, f32
// compute. The one loop of every elementwise kernel and converter of this ISA.
template <class Op, int Arity, class In, class Out = In>
void run(typename Out::T* out, const typename In::T* const* in, int64_t n, const float* p) {
  using A = Arch;
  constexpr int W = A::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    if constexpr (Arity == 1)
      Out::store(out + i, Op::template apply<A>(In::load(in[0] + i), p));
    else
      Out::store(out + i, Op::template apply<A>(In::load(in[0] + i), In::load(in[1] + i), p));
  }
  if (i < n) {
    // Tail through the same vector code on a zero-padded copy, so element results never depend on
    // where a chunk boundary falls (thread-count independence).
    typename In::T a[W] = {}, b[W] = {};
    typename Out::T o[W];
    const int64_t r = n - i;
    for (int64_t k = 0; k < r; ++k) a[k] = in[0][i + k];
    if constexpr (Arity == 1) {
      Out::store(o, Op::template apply<A>(In::load(a), p));
    } else {
      for (int64_t k = 0; k < r; ++k) b[k] = in[1][i + k];
      Out::store(o, Op::template apply<A>(In::load(a), In::load(b), p));
    }
    for (int64_t k = 0; k < r; ++k) out[i + k] = o[k];
  }
}

template <class Op, int Arity>
void run_f32(float* out, const float* const* in, int64_t n, const float* p) {
  run<Op, Arity, F32Lanes>(out, in, n, p);
}

template <class Op, int Arity>
void run_bf16(uint16_t* out, const uint16_t* const* in, int64_t n, const float* p) {
  run<Op, Arity, Bf16Lanes>(out, in, n, p);
}

// The converters: the copy "op" between storage types.
struct Identity {
  template <class A>
  static typename A::V apply(typename A::V x, const float*) {
    return x;
  }
};
inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  run<Identity, 1, Bf16Lanes, F32Lanes>(out, &in, n, nullptr);
}
inline void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  run<Identity, 1, F32Lanes, Bf16Lanes>(out, &in, n, nullptr);
}

#if defined(__AVX2__)
// f16 converters (F16C), 8 values per step; the tail goes through the same code on a padded copy.
// (No calls to core's inline scalar converters here: an out-of-line copy compiled for this ISA
// could be chosen by the linker for callers on other CPUs.)
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
      {
#define HP_EW_ENTRY(e, F, arity) &run_bf16<ew::F, arity>,
          HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
      },
      &bf16_to_f32, &f32_to_bf16, &f16_to_f32, &f32_to_f16, &sum_f32, &max_f32, &dot_f32};
  return t;
}

}  // namespace hp::kernels::HP_ISA
