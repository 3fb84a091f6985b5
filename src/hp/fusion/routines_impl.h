// Body of a fusion routine TU: the RoutineTable of routines.h for this TU's Arch. Included once per
// ISA after defining HP_ISA; reuses the eager kernels' TU body (ew_impl.h: functors, converters,
// reduction order), so nothing here redefines an op.
#pragma once

#include <type_traits>

#include "hp/fusion/routines.h"
#include "hp/kernels/cpu/ew_impl.h"

namespace hp::kernels::HP_ISA {
namespace fused {

using A = Arch;
using V = A::V;
constexpr int W = A::W;

// out[i] = f(in[0][i], …, in[K-1][i]) over n elements; the < W tail through the same vector code on
// a zero-padded copy (as run_f32), so element results never depend on n or the run's start.
template <int K, class F>
inline void map_k(float* out, const float* const* in, int64_t n, F f) {
  int64_t i = 0;
  auto at = [&](const float* const* src, int64_t off, int k) { return A::load(src[k] + off); };
  for (; i + W <= n; i += W) {
    if constexpr (K == 1) A::store(out + i, f(at(in, i, 0)));
    if constexpr (K == 3) A::store(out + i, f(at(in, i, 0), at(in, i, 1), at(in, i, 2)));
  }
  if (i < n) {
    float pad[3][W] = {}, o[W];
    const float* pp[3] = {pad[0], pad[1], pad[2]};
    for (int k = 0; k < K; ++k)
      for (int64_t j = 0; j < n - i; ++j) pad[k][j] = in[k][i + j];
    if constexpr (K == 1) A::store(o, f(at(pp, 0, 0)));
    if constexpr (K == 3) A::store(o, f(at(pp, 0, 0), at(pp, 0, 1), at(pp, 0, 2)));
    for (int64_t j = 0; j < n - i; ++j) out[i + j] = o[j];
  }
}

template <class Op>
void run_vs(float* out, const float* const* in, int64_t n, const float* p) {
  const V s = A::set1(p[3]);
  map_k<1>(out, in, n, [s, p](V x) { return Op::template apply<A>(x, s, p); });
}

template <class Op>
void run_sv(float* out, const float* const* in, int64_t n, const float* p) {
  const V s = A::set1(p[3]);
  map_k<1>(out, in, n, [s, p](V y) { return Op::template apply<A>(s, y, p); });
}

inline void select(float* out, const float* const* in, int64_t n) {
  map_k<3>(out, in, n, [](V c, V a, V b) { return A::select(A::eq(c, A::set1(0.0f)), b, a); });
}

// The vector ISAs round to bf16 in registers with the converters' own rounding (Arch::to_bf16:
// nearest even, a NaN quieted, its top 16 bits kept), without a trip through 16-bit memory: the
// same bits as the eager f32 -> bf16 -> f32 (a bf16 region's every node rounds, so this was a
// quarter of a bf16 SwiGLU's time). The scalar build goes through the eager converters.
#if defined(__AVX2__) || defined(__AVX512F__)
// Arch::to_bf16 and the shift back folded into one mask: (u + 0x7FFF + lsb) with the low half
// cleared, a NaN its top half with the quiet bit set; one op fewer than to_bf16 then slli.
__attribute__((always_inline)) inline V round_v(V v) {
  const A::I u = A::bits(v);
  const A::I r = A::add(u, A::add(A::seti(0x7FFF), A::and_(A::srli<16>(u), A::seti(1))));
  const A::I q = A::select(A::unord(v), A::or_(u, A::seti(0x00400000)), r);
  return A::floats(A::and_(q, A::seti(static_cast<int32_t>(0xFFFF0000u))));
}
#else
inline V round_v(V v) {
  uint16_t b = 0;
  f32_to_bf16(&v, &b, 1);
  bf16_to_f32(&b, &v, 1);
  return v;
}
#endif

inline void round_bf16(float* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) A::store(out + i, round_v(A::load(in + i)));
  for (; i < n; ++i) {
    uint16_t b = 0;
    f32_to_bf16(in + i, &b, 1);
    bf16_to_f32(&b, out + i, 1);
  }
}

inline void fill(float* out, float v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = v;
}

// The combine steps of sum_f32 / max_f32 (ew_impl.h), operand order included.
inline V combine(int red, V a, V b) {
  if (red == 0) return A::add(a, b);
  return A::select(A::isnan(a), a, A::select(A::isnan(b), b, A::max(a, b)));
}

inline void red_init(float* acc, int red) {
  const float id = red == 0 ? 0.0f : -__builtin_inff();
  for (int k = 0; k < 4 * W; ++k) acc[k] = id;
}

inline void red_chunk(float* acc, const float* x, int64_t n, int red) {
  V a[4] = {A::load(acc), A::load(acc + W), A::load(acc + 2 * W), A::load(acc + 3 * W)};
  for (int64_t i = 0; i + 4 * W <= n; i += 4 * W)
    for (int k = 0; k < 4; ++k) a[k] = combine(red, a[k], A::load(x + i + k * W));
  for (int k = 0; k < 4; ++k) A::store(acc + k * W, a[k]);
}

inline float red_finish(float* acc, const float* x, int64_t n, int red) {
  const int64_t full = n - n % (4 * W);
  red_chunk(acc, x, full, red);
  V a[4] = {A::load(acc), A::load(acc + W), A::load(acc + 2 * W), A::load(acc + 3 * W)};
  int64_t i = full;
  for (; i + W <= n; i += W) a[0] = combine(red, a[0], A::load(x + i));
  float lanes[W];
  A::store(lanes, combine(red, combine(red, a[0], a[1]), combine(red, a[2], a[3])));
  if (red == 0) {
    float r = 0;
    for (int k = 0; k < W; ++k) r += lanes[k];
    for (; i < n; ++i) r += x[i];
    return r;
  }
  float r = -__builtin_inff();
  bool nan = false;
  for (int k = 0; k < W; ++k) nan |= lanes[k] != lanes[k], r = lanes[k] > r ? lanes[k] : r;
  for (; i < n; ++i) nan |= x[i] != x[i], r = x[i] > r ? x[i] : r;
  return nan ? __builtin_nanf("") : r;
}

// ---- chains (routines.h): kG vectors per group keep the running value in registers ----
constexpr int kG = 8;

// W values at element off of a chain source: f32, or bf16 widened (exact).
__attribute__((always_inline)) inline V load_src(const void* p, int64_t off, bool bf16) {
  if (!bf16) return A::load(static_cast<const float*>(p) + off);
  const uint16_t* q = static_cast<const uint16_t*>(p) + off;
#if defined(__AVX2__) || defined(__AVX512F__)
  return A::load_bf16(q);
#else
  alignas(64) float t[W];
  bf16_to_f32(q, t, W);
  return A::load(t);
#endif
}

// Stores W values at element off of a chain destination: f32, or narrowed to bf16 (a bf16 node's
// value is already rounded, so this is exact).
__attribute__((always_inline)) inline void store_dst(void* p, int64_t off, V v, bool bf16) {
  if (!bf16) return A::store(static_cast<float*>(p) + off, v);
  uint16_t* q = static_cast<uint16_t*>(p) + off;
#if defined(__AVX2__) || defined(__AVX512F__)
  A::store_bf16(q, v);
#else
  alignas(64) float t[W];
  A::store(t, v);
  f32_to_bf16(t, q, W);
#endif
}

// Applies chain op c (unary, or binary in any form; not load / store) to the group `acc` of NG
// vectors: the unary functors here, the binary ones through HP_CHAIN_BINARY_CALL(Functor), which
// each group layout defines around its use (chain_group: vector operands one vector at a time;
// chain_pairs: in pairs). A macro rather than a helper taking a callback: as a function the
// compiler allocated the pairs chain's registers worse (bf16 silu chain 51 -> 56 us in cache).
#define HP_CHAIN_UNARY(e, F, arity)                                 \
  case EwOp::e:                                                     \
    if constexpr (arity == 1) {                                     \
      _Pragma("GCC unroll 8") for (int g = 0; g < NG; ++g) acc[g] = \
          ew::F::template apply<A>(acc[g], c.p);                    \
    }                                                               \
    break;
#define HP_CHAIN_BINARY(e, F, arity)                           \
  case EwOp::e:                                                \
    if constexpr (arity == 2) HP_CHAIN_BINARY_CALL(ew::F);     \
    break;
#define HP_CHAIN_APPLY(c)                                       \
  if ((c).form == fusion::ChainForm::unary) {                   \
    switch (static_cast<EwOp>((c).op)) {                        \
      HP_EW_OPS(HP_CHAIN_UNARY)                                 \
      default:                                                  \
        break;                                                  \
    }                                                           \
  } else {                                                      \
    const V s = A::set1((c).s);                                 \
    switch (static_cast<EwOp>((c).op)) {                        \
      HP_EW_OPS(HP_CHAIN_BINARY)                                \
      default:                                                  \
        break;                                                  \
    }                                                           \
  }

template <int NG, class F>
__attribute__((always_inline)) inline void chain_binary(fusion::ChainForm form, V* acc,
                                                        const void* src, bool bf16, V s,
                                                        const float* p) {
  using fusion::ChainForm;
  // One branch per op and group; the loops inside are unrolled over the group's registers.
  switch (form) {
    case ChainForm::acc_v:
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g)
        acc[g] = F::template apply<A>(acc[g], load_src(src, g * W, bf16), p);
      break;
    case ChainForm::v_acc:
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g)
        acc[g] = F::template apply<A>(load_src(src, g * W, bf16), acc[g], p);
      break;
    case ChainForm::acc_s:
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g) acc[g] = F::template apply<A>(acc[g], s, p);
      break;
    default:
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g) acc[g] = F::template apply<A>(s, acc[g], p);
      break;
  }
}

template <int NG>
__attribute__((always_inline)) inline void chain_group(float* out, void* const* P, int64_t i,
                                                       const fusion::ChainOp* ops, int nops) {
  using fusion::ChainForm;
  V acc[NG];
#pragma GCC unroll 8
  for (int g = 0; g < NG; ++g) acc[g] = A::set1(0.0f);  // ops[0] loads; this quiets -Wuninitialized
  for (int k = 0; k < nops; ++k) {
    const fusion::ChainOp& c = ops[k];
    // Element i of the source: f32 or bf16 in memory.
    const void* src = static_cast<const char*>(P[c.src]) + i * (c.bf16 ? 2 : 4);
    if (c.form == ChainForm::store) {
      void* dst = static_cast<char*>(P[c.src]) + i * (c.bf16 ? 2 : 4);
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g) store_dst(dst, g * W, acc[g], c.bf16);
    } else if (c.form == ChainForm::load) {
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g) acc[g] = load_src(src, g * W, c.bf16);
    } else {
#define HP_CHAIN_BINARY_CALL(F) chain_binary<NG, F>(c.form, acc, src, c.bf16, s, c.p)
      HP_CHAIN_APPLY(c)
#undef HP_CHAIN_BINARY_CALL
    }
    if (c.round) {
#pragma GCC unroll 8
      for (int g = 0; g < NG; ++g) acc[g] = round_v(acc[g]);
    }
  }
  if (out == nullptr) return;
#pragma GCC unroll 8
  for (int g = 0; g < NG; ++g) A::store(out + i + g * W, acc[g]);
}

#if defined(__AVX2__) || defined(__AVX512F__)
// ---- chains whose every memory operand is bf16 (loads, vector sources, stores; no f32 value out):
// vectors 2k and 2k+1 of a group hold the 2W values at 2kW in load_bf16x2's lane order, as the eager
// bf16 kernels hold them (ew_impl.h run<Op, Arity, Bf16Lanes>): one load and two unpacks widen 2W
// values and one pack narrows them, where one vector at a time takes a zero-extend and a shift
// per W each way and a cross-lane permute on the store. The ops are lane-wise, so the order
// changes no value. A bf16 store after a rounded value (a bf16 node's result or a bf16 load) takes
// the top halves: exact, without the second rounding store_bf16 would do. A function of its own,
// so the register allocation of the general chain above is not disturbed.

template <int NG, class F>
__attribute__((always_inline)) inline void pairs_binary(fusion::ChainForm form, V* acc,
                                                        const uint16_t* src, V s,
                                                        const float* p) {
  using fusion::ChainForm;
  switch (form) {
    case ChainForm::acc_v:
#pragma GCC unroll 4
      for (int g = 0; g < NG; g += 2) {
        V x0, x1;
        A::load_bf16x2(src + g * W, &x0, &x1);
        acc[g] = F::template apply<A>(acc[g], x0, p);
        acc[g + 1] = F::template apply<A>(acc[g + 1], x1, p);
      }
      break;
    case ChainForm::v_acc:
#pragma GCC unroll 4
      for (int g = 0; g < NG; g += 2) {
        V x0, x1;
        A::load_bf16x2(src + g * W, &x0, &x1);
        acc[g] = F::template apply<A>(x0, acc[g], p);
        acc[g + 1] = F::template apply<A>(x1, acc[g + 1], p);
      }
      break;
    default:  // acc_s, s_acc: no vector operand, as in the general chain
      chain_binary<NG, F>(form, acc, nullptr, false, s, p);
      break;
  }
}

// A long unary op without parameters (ew_impl.h table_op: exp, log, tanh, sigmoid, silu, gelu,
// gelu_tanh) applied to the bf16 values the chain has just loaded from x, rounded to bf16: the
// eager bf16 kernel's table of its own results (lookup_table: the same bits as computing and
// rounding here), looked up as the eager kernel does (table_lookup); the results are widened
// back into the group in its pair order. Returns false for the other ops.
template <int NG>
__attribute__((always_inline)) inline bool table_unary(uint8_t op, const uint16_t* x, V* acc) {
  const uint16_t* table = nullptr;
  switch (static_cast<EwOp>(op)) {
#define HP_TABLE_CASE(e, F, arity)                                                       \
  case EwOp::e:                                                                          \
    if constexpr (arity == 1 && table_op<ew::F>()) table = lookup_table<ew::F, Bf16Lanes>(); \
    break;
    HP_EW_OPS(HP_TABLE_CASE)
#undef HP_TABLE_CASE
    default:
      break;
  }
  if (table == nullptr) return false;
  alignas(64) uint16_t r[NG * W];
  table_lookup(table, x, r, NG * W);
#pragma GCC unroll 4
  for (int g = 0; g < NG; g += 2) A::load_bf16x2(r + g * W, &acc[g], &acc[g + 1]);
  return true;
}

// The groups of [0, n) (n a multiple of NG·W) of a chain with bf16 memory operands only. (A template
// so that `if constexpr` discards the op cases of the other arity.)
template <int NG>
__attribute__((noinline)) void chain_pairs(void* const* P, int64_t n, const fusion::ChainOp* ops,
                                           int nops) {
  using fusion::ChainForm;
  for (int64_t i = 0; i < n; i += NG * W) {
    V acc[NG];
#pragma GCC unroll 8
    for (int g = 0; g < NG; ++g) acc[g] = A::set1(0.0f);  // ops[0] loads
    bool rounded = false;                // every lane of acc is a bf16 value
    const uint16_t* loaded = nullptr;  // acc is exactly the bf16 values here (the op before loaded)
    for (int k = 0; k < nops; ++k) {
      const fusion::ChainOp& c = ops[k];
      uint16_t* q = static_cast<uint16_t*>(P[c.src]) + i;
      if (c.form == ChainForm::store) {
        if (rounded) {
#pragma GCC unroll 4
          for (int g = 0; g < NG; g += 2)
            A::store_u16x2(q + g * W, A::srli<16>(A::bits(acc[g])),
                           A::srli<16>(A::bits(acc[g + 1])));
        } else {
#pragma GCC unroll 4
          for (int g = 0; g < NG; g += 2) A::store_bf16x2(q + g * W, acc[g], acc[g + 1]);
        }
        continue;
      }
      const uint16_t* x = loaded;
      loaded = nullptr;
      if (c.form == ChainForm::load) {
#pragma GCC unroll 4
        for (int g = 0; g < NG; g += 2) A::load_bf16x2(q + g * W, &acc[g], &acc[g + 1]);
        loaded = q;
      } else if (x != nullptr && c.form == ChainForm::unary && c.round &&
                 table_unary<NG>(c.op, x, acc)) {
        rounded = true;
        continue;
      } else {
#define HP_CHAIN_BINARY_CALL(F) pairs_binary<NG, F>(c.form, acc, q, s, c.p)
        HP_CHAIN_APPLY(c)
#undef HP_CHAIN_BINARY_CALL
      }
      if (c.round) {
#pragma GCC unroll 8
        for (int g = 0; g < NG; ++g) acc[g] = round_v(acc[g]);
      }
      rounded = c.round || c.form == ChainForm::load;
    }
  }
}

#undef HP_CHAIN_APPLY
#undef HP_CHAIN_BINARY
#undef HP_CHAIN_UNARY

// Whether a chain runs as pairs: no f32 destination, every memory operand bf16.
inline bool all_bf16(const float* out, const fusion::ChainOp* ops, int nops) {
  if (out != nullptr) return false;
  for (int k = 0; k < nops; ++k) {
    const fusion::ChainForm f = ops[k].form;
    const bool mem = f == fusion::ChainForm::load || f == fusion::ChainForm::acc_v ||
                     f == fusion::ChainForm::v_acc || f == fusion::ChainForm::store;
    if (mem && !ops[k].bf16) return false;
  }
  return true;
}
#endif

inline void chain(float* out, void* const* P, int64_t n, const fusion::ChainOp* ops, int nops) {
  int64_t i = 0;
#if defined(__AVX2__) || defined(__AVX512F__)
  if (all_bf16(out, ops, nops)) {
    i = n / (kG * W) * (kG * W);
    chain_pairs<kG>(P, i, ops, nops);
  }
#endif
  for (; i + kG * W <= n; i += kG * W) chain_group<kG>(out, P, i, ops, nops);
  for (; i + W <= n; i += W) chain_group<1>(out, P, i, ops, nops);
  if (i == n) return;
  // The < W tail: every source copied to a zero-padded vector (sources renumbered 0, 1, …), run
  // through the same code.
  float pad[fusion::kMaxChainSources][W] = {}, o[W];
  void* Q[fusion::kMaxChainSources] = {};
  int16_t done[fusion::kMaxChainSources];
  fusion::ChainOp tops[fusion::kMaxChainOps];
  int used = 0;
  for (int k = 0; k < nops; ++k) {
    tops[k] = ops[k];
    tops[k].src = 0;
    tops[k].bf16 = 0;  // the padded copies are f32
    const fusion::ChainForm f = ops[k].form;
    if (f != fusion::ChainForm::load && f != fusion::ChainForm::acc_v &&
        f != fusion::ChainForm::v_acc && f != fusion::ChainForm::store)
      continue;
    int idx = 0;
    while (idx < used && done[idx] != ops[k].src) ++idx;
    if (idx == used) {
      done[used++] = ops[k].src;
      if (f != fusion::ChainForm::store && ops[k].bf16)  // a stored value is written by the chain
        bf16_to_f32(static_cast<const uint16_t*>(P[ops[k].src]) + i, pad[idx], n - i);
      else if (f != fusion::ChainForm::store)
        for (int64_t j = 0; j < n - i; ++j)
          pad[idx][j] = static_cast<const float*>(P[ops[k].src])[i + j];
      Q[idx] = pad[idx];
    }
    tops[k].src = static_cast<int16_t>(idx);
  }
  chain_group<1>(o, Q, 0, tops, nops);
  if (out != nullptr)
    for (int64_t j = 0; j < n - i; ++j) out[i + j] = o[j];
  for (int k = 0; k < nops; ++k) {  // the live part of values the chain stored
    if (ops[k].form != fusion::ChainForm::store) continue;
    if (ops[k].bf16)
      f32_to_bf16(pad[tops[k].src], static_cast<uint16_t*>(P[ops[k].src]) + i, n - i);
    else
      for (int64_t j = 0; j < n - i; ++j)
        static_cast<float*>(P[ops[k].src])[i + j] = pad[tops[k].src][j];
  }
}

template <class Op, int Arity>
constexpr EwF32Fn vs_fn() {
  if constexpr (Arity == 2) return &run_vs<Op>;
  return nullptr;
}
template <class Op, int Arity>
constexpr EwF32Fn sv_fn() {
  if constexpr (Arity == 2) return &run_sv<Op>;
  return nullptr;
}

}  // namespace fused

inline const fusion::RoutineTable& routine_table() {
  static const fusion::RoutineTable t = {{
#define HP_EW_ENTRY(e, F, arity) fused::vs_fn<ew::F, arity>(),
                                             HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
                                         },
                                         {
#define HP_EW_ENTRY(e, F, arity) fused::sv_fn<ew::F, arity>(),
                                             HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
                                         },
                                         &fused::select,
                                         &fused::round_bf16,
                                         &fused::fill,
                                         &fused::red_init,
                                         &fused::red_chunk,
                                         &fused::red_finish,
                                         &fused::chain};
  return t;
}

}  // namespace hp::kernels::HP_ISA
