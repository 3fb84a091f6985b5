// Body of an ISA translation unit for elementwise kernels: instantiates every functor of ew_ops.h
// for this TU's Arch and fills an EwTable. Included once per ISA (ew_scalar.cpp, ew_avx2.cpp,
// ew_avx512.cpp) after defining HP_ISA.
#pragma once

#include <type_traits>

#include "hp/core/dtype.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/simd_arch.h"

namespace hp::kernels::HP_ISA {

// The widening converters (defined with the others below), for the Lanes' widen.
inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n);
inline void f16_to_f32(const uint16_t* in, float* out, int64_t n);

// How a kernel's operands and result are stored: 2W lanes read into two f32 vectors, and written
// back from two. The order of the lanes inside the pair is the storage type's own (store2 undoes
// load2); elementwise code does not depend on it.
struct F32Lanes {
  using T = float;
  static void load2(const float* p, Arch::V* a, Arch::V* b) {
    *a = Arch::load(p);
    *b = Arch::load(p + Arch::W);
  }
  static void store2(float* p, Arch::V a, Arch::V b) {
    Arch::store(p, a);
    Arch::store(p + Arch::W, b);
  }
};
// bf16 widened on load (exact) and rounded to nearest even on store, in registers: the same bits as
// converting to an f32 buffer, computing there and converting back.
struct Bf16Lanes {
  using T = uint16_t;
  static void widen(const uint16_t* in, float* out, int64_t n) { bf16_to_f32(in, out, n); }
#if defined(__AVX2__)
  static void load2(const uint16_t* p, Arch::V* a, Arch::V* b) { Arch::load_bf16x2(p, a, b); }
  static void store2(uint16_t* p, Arch::V a, Arch::V b) { Arch::store_bf16x2(p, a, b); }
#else
  static void load2(const uint16_t* p, float* a, float* b) {
    *a = hp::bf16_to_f32(p[0]);
    *b = hp::bf16_to_f32(p[1]);
  }
  static void store2(uint16_t* p, float a, float b) {
    p[0] = hp::f32_to_bf16(a);
    p[1] = hp::f32_to_bf16(b);
  }
#endif
};

// f16 the same way, through F16C's conversions (the converters' instructions, so the same bits).
struct F16Lanes {
  using T = uint16_t;
  static void widen(const uint16_t* in, float* out, int64_t n) { f16_to_f32(in, out, n); }
#if defined(__AVX2__)
  static void load2(const uint16_t* p, Arch::V* a, Arch::V* b) { Arch::load_f16x2(p, a, b); }
  static void store2(uint16_t* p, Arch::V a, Arch::V b) { Arch::store_f16x2(p, a, b); }
#else
  static void load2(const uint16_t* p, float* a, float* b) {
    *a = hp::f16_to_f32(p[0]);
    *b = hp::f16_to_f32(p[1]);
  }
  static void store2(uint16_t* p, float a, float b) {
    p[0] = hp::f32_to_f16(a);
    p[1] = hp::f32_to_f16(b);
  }
#endif
};

// out[0, n) from in[0..Arity)[0, n) by step(in0, in1, out) over N elements at a time. The tail goes
// through the same step on a zero-padded copy, so element results never depend on where a chunk
// boundary falls (thread-count independence).
template <int N, int Arity, class T, class Step>
inline void run_steps(T* out, const T* const* in, int64_t n, Step step) {
  int64_t i = 0;
  for (; i + N <= n; i += N) step(in[0] + i, Arity == 2 ? in[1] + i : nullptr, out + i);
  if (i < n) {
    T a[N] = {}, b[N] = {};
    T o[N];
    const int64_t r = n - i;
    for (int64_t k = 0; k < r; ++k) a[k] = in[0][i + k];
    if constexpr (Arity == 2)
      for (int64_t k = 0; k < r; ++k) b[k] = in[1][i + k];
    step(a, b, o);
    for (int64_t k = 0; k < r; ++k) out[i + k] = o[k];
  }
}

// out[0, n) = Op(in[0][i][, in[1][i]]) over operands and result stored as S, f32 compute: the one
// loop of every elementwise kernel of this ISA.
//
// Two vectors per step: their dependency chains (exp's polynomial, a division: ~90 cycles deep)
// overlap, and bf16 is widened and narrowed 2W lanes per shuffle. Converting one vector at a time
// (two shuffles and a permute each way), a bf16 silu cost 0.9 ns per element against 0.7 through
// f32 tiles on Zen 3; the f32 kernel alone 0.5.
template <class Op, int Arity, class S>
void run(typename S::T* out, const typename S::T* const* in, int64_t n, const float* p) {
  using A = Arch;
  using V = typename A::V;
  using T = typename S::T;
  run_steps<2 * A::W, Arity>(out, in, n, [p](const T* a, const T* b, T* o) {
    V x0, x1;
    S::load2(a, &x0, &x1);
    if constexpr (Arity == 1) {
      S::store2(o, Op::template apply<A>(x0, p), Op::template apply<A>(x1, p));
    } else {
      V y0, y1;
      S::load2(b, &y0, &y1);
      S::store2(o, Op::template apply<A>(x0, y0, p), Op::template apply<A>(x1, y1, p));
    }
  });
}

template <class Op, int Arity>
void run_f32(float* out, const float* const* in, int64_t n, const float* p) {
  run<Op, Arity, F32Lanes>(out, in, n, p);
}

// 16-bit storage through L1-resident f32 tiles: widen kTile elements of each operand (load2's lane
// order, which store2 undoes), run the f32 loop on them, narrow the result; the last partial tile
// runs the in-register loop above. The same bits as run<Op, Arity, S> (the conversions are exact
// and the f32 code is the same), but a long op's code no longer carries the conversions between
// its two dependency chains (figures at long_op below).
template <class Op, int Arity, class S>
void run_tiled(typename S::T* out, const typename S::T* const* in, int64_t n, const float* p) {
#if defined(__AVX2__)
  using A = Arch;
  constexpr int W = A::W;
  constexpr int64_t kTile = 512;  // 2 KiB of f32 per operand
  alignas(64) float tile[Arity + 1][kTile];
  const float* tile_in[2] = {tile[0], tile[Arity == 2 ? 1 : 0]};
  int64_t i = 0;
  for (; i + kTile <= n; i += kTile) {
    for (int k = 0; k < Arity; ++k)
      for (int64_t j = 0; j < kTile; j += 2 * W) {
        typename A::V a, b;
        S::load2(in[k] + i + j, &a, &b);
        A::store(tile[k] + j, a);
        A::store(tile[k] + j + W, b);
      }
    run<Op, Arity, F32Lanes>(tile[Arity], tile_in, kTile, p);
    for (int64_t j = 0; j < kTile; j += 2 * W)
      S::store2(out + i + j, A::load(tile[Arity] + j), A::load(tile[Arity] + j + W));
  }
  if (i == n) return;
  const typename S::T* rest[2] = {in[0] + i, Arity == 2 ? in[1] + i : nullptr};
  run<Op, Arity, S>(out + i, rest, n - i, p);
#else
  run<Op, Arity, S>(out, in, n, p);
#endif
}

// The ops whose f32 code is long (exp, log, tanh, erf inside): for them the tiles win (in cache on
// Zen 3, bf16 ns per element in registers → tiles: silu 0.92 → 0.69, exp 0.75 → 0.61, gelu 1.34 →
// 1.21, gelu_tanh 1.74 → 1.58, silu_bwd 1.19 → 0.98, gelu_bwd 1.94 → 1.85). A short op stays in
// registers, where the tiles' extra round trip through L1 costs more than the op (add 0.17 → 0.29).
// The unary ones among them without parameters take the lookup table below instead (~0.41), and
// on AVX-512 the backward ones g · h(x) a table of h (grad_table).
template <class Op>
constexpr bool long_op() {
  return std::is_same_v<Op, ew::Exp> || std::is_same_v<Op, ew::Log> ||
         std::is_same_v<Op, ew::Tanh> || std::is_same_v<Op, ew::Sigmoid> ||
         std::is_same_v<Op, ew::Silu> || std::is_same_v<Op, ew::Gelu> ||
         std::is_same_v<Op, ew::GeluTanh> || std::is_same_v<Op, ew::PowScalar> ||
         std::is_same_v<Op, ew::SiluBwd> || std::is_same_v<Op, ew::GeluBwd> ||
         std::is_same_v<Op, ew::GeluTanhBwd> || std::is_same_v<Op, ew::PowScalarBwd>;
}

// A long unary op without parameters has only 65536 inputs in a 16-bit type: its table holds the
// kernel's own result for each (run<Op, 1, S> over every pattern, so the same bits), and a call is
// one lookup per element (llama.cpp's f16 GELU table). 128 KiB per op and type (+ one padding
// element for gather_u16), built on first use (~0.1 ms); the inputs of one tensor touch a small,
// cache-resident part of it.
template <class Op>
constexpr bool table_op() {
  return long_op<Op>() && !std::is_same_v<Op, ew::PowScalar>;
}

// Plain arrays, not std::vector: a std template instantiated in an ISA translation unit is a weak
// symbol the linker may share with non-ISA code (tests/kernels/isa_symbols.sh).
template <class Op, class S>
const uint16_t* lookup_table() {
  struct Table {
    uint16_t v[65536 + 1];  // + one padding entry: gather_u16 reads 4 bytes
  };
  static const Table* table = [] {
    auto* all = new Table, *result = new Table;
    for (int i = 0; i < 65536; ++i) all->v[i] = static_cast<uint16_t>(i);
    const uint16_t* in[1] = {all->v};
    run<Op, 1, S>(result->v, in, 65536, nullptr);
    result->v[65536] = 0;
    delete all;
    return result;  // lives for the process, like a function-local static
  }();
  return table->v;
}

// The backward ops g · h(x) of the long activations (ew::GradTimes): a table of the f32 h(x) for
// every 16-bit x (run over the widened patterns: the kernel's own bits), 256 KiB per op and type.
template <class Op>
constexpr bool grad_table_op() {
  return requires { typename Op::Grad; };
}

template <class Op, class S>
const float* grad_table() {
  struct Table {
    float v[65536];
  };
  static const Table* table = [] {
    auto* x = new Table, *h = new Table;
    for (int base = 0; base < 65536; base += 256) {
      uint16_t bits[256];
      for (int k = 0; k < 256; ++k) bits[k] = static_cast<uint16_t>(base + k);
      S::widen(bits, x->v + base, 256);
    }
    const float* in[1] = {x->v};
    run<typename Op::Grad, 1, F32Lanes>(h->v, in, 65536, nullptr);
    delete x;
    return h;  // lives for the process
  }();
  return table->v;
}

// out[i] = table[x[i]] over [0, n) (a lookup_table). AVX-512 gathers W entries per instruction:
// 0.19 ns per element in cache against 0.36 one load at a time (silu bf16, Emerald Rapids). AVX2
// keeps the loads as tuned on Zen 3 (0.41 there; an 8-entry gather took 0.67, docs/PERFORMANCE.md),
// unrolled: the 4-instruction loop took 0.36 or 0.63 ns on Emerald Rapids by where it landed in
// the code (the same instructions), 0.29 unrolled.
inline void table_lookup(const uint16_t* table, const uint16_t* x, uint16_t* out, int64_t n) {
#if defined(__AVX512F__)
  using A = Arch;
  const uint16_t* in[1] = {x};
  run_steps<2 * A::W, 1>(out, in, n, [table](const uint16_t* a, const uint16_t*, uint16_t* o) {
    A::I i0, i1;
    A::load_u16x2(a, &i0, &i1);
    A::store_u16x2(o, A::gather_u16(table, i0), A::gather_u16(table, i1));
  });
#else
#pragma GCC unroll 4
  for (int64_t i = 0; i < n; ++i) out[i] = table[x[i]];
#endif
}

#if defined(__AVX512F__)
// out = g · h(x) with h gathered from grad_table and g widened, rounded as S: the f32 kernel's
// multiply on the f32 h it computes, so the same bits. In cache on Emerald Rapids, bf16 ns per
// element computed through tiles → gathered: silu_bwd 0.55 → 0.25, gelu_bwd 1.0 → 0.25. (AVX2
// keeps the tiles: not measured on Zen 3, whose gathers were slow for the unary table above.)
template <class Op, class S>
void run_grad_table(uint16_t* out, const uint16_t* const* in, int64_t n) {
  using A = Arch;
  const float* table = grad_table<Op, S>();
  run_steps<2 * A::W, 2>(out, in, n, [table](const uint16_t* x, const uint16_t* g, uint16_t* o) {
    A::I i0, i1;  // the patterns of x in S::load2's lane order, as g's
    if constexpr (std::is_same_v<S, F16Lanes>) {
      i0 = A::load_u16(x), i1 = A::load_u16(x + A::W);
    } else {
      A::load_u16x2(x, &i0, &i1);
    }
    A::V g0, g1;
    S::load2(g, &g0, &g1);
    S::store2(o, Op::template times<A>(A::gather(table, i0), g0),
              Op::template times<A>(A::gather(table, i1), g1));
  });
}
#endif

template <class Op, int Arity, class S>
void run_16bit(uint16_t* out, const uint16_t* const* in, int64_t n, const float* p) {
  if constexpr (Arity == 1 && table_op<Op>()) {
    table_lookup(lookup_table<Op, S>(), in[0], out, n);
#if defined(__AVX512F__)
  } else if constexpr (grad_table_op<Op>()) {
    run_grad_table<Op, S>(out, in, n);
#endif
  } else if constexpr (long_op<Op>()) {
    run_tiled<Op, Arity, S>(out, in, n, p);
  } else {
    run<Op, Arity, S>(out, in, n, p);
  }
}

template <class Op, int Arity>
void run_bf16(uint16_t* out, const uint16_t* const* in, int64_t n, const float* p) {
  run_16bit<Op, Arity, Bf16Lanes>(out, in, n, p);
}

template <class Op, int Arity>
void run_f16(uint16_t* out, const uint16_t* const* in, int64_t n, const float* p) {
  run_16bit<Op, Arity, F16Lanes>(out, in, n, p);
}

// Converters: N values per step; the tail goes through the same code on a padded copy.
template <int N, class In, class Out, class Step>
inline void convert_n(const In* in, Out* out, int64_t n, Step step) {
  int64_t i = 0;
  for (; i + N <= n; i += N) step(in + i, out + i);
  if (i < n) {
    In a[N] = {};
    Out o[N];
    for (int64_t k = 0; k < n - i; ++k) a[k] = in[i + k];
    step(a, o);
    for (int64_t k = 0; k < n - i; ++k) out[i + k] = o[k];
  }
}

#if defined(__AVX2__)
inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  convert_n<Arch::W>(in, out, n, [](const uint16_t* a, float* o) { Arch::store(o, Arch::load_bf16(a)); });
}
inline void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  convert_n<Arch::W>(in, out, n, [](const float* a, uint16_t* o) { Arch::store_bf16(o, Arch::load(a)); });
}
#else
inline void bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = hp::bf16_to_f32(in[i]);
}
inline void f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = hp::f32_to_bf16(in[i]);
}
#endif

#if defined(__AVX2__)
// f16 through F16C, 8 values per step. (No calls to core's inline scalar converters in vector code:
// an out-of-line copy compiled for this ISA could be chosen by the linker for callers on other CPUs.)
inline void f16_to_f32(const uint16_t* in, float* out, int64_t n) {
  convert_n<8>(in, out, n, [](const uint16_t* a, float* o) {
    _mm256_storeu_ps(o, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))));
  });
}
inline void f32_to_f16(const float* in, uint16_t* out, int64_t n) {
  convert_n<8>(in, out, n, [](const float* a, uint16_t* o) {
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
      {
#define HP_EW_ENTRY(e, F, arity) &run_f16<ew::F, arity>,
          HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
      },
      &bf16_to_f32, &f32_to_bf16, &f16_to_f32, &f32_to_f16, &sum_f32, &max_f32, &dot_f32};
  return t;
}

}  // namespace hp::kernels::HP_ISA
