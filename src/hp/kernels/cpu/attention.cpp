// Attention entry points: check → resolve options → the kernels of the registry's backend
// (registry.h: AVX-512, AVX2+FMA or the scalar ones here, all instantiations of attention_impl.h).
#include "hp/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "hp/core/error.h"
#include "hp/kernels/cpu/attention_impl.h"

namespace hp::kernels {
namespace detail {
namespace {

// Portable primitives: the same contract as the SIMD ones, plain loops (the compiler may still
// vectorize them for the baseline ISA). Any width would do; 8 keeps the padded widths of the
// AVX2 kernel.
struct ScalarOps {
  static constexpr int64_t kLanes = 8;

  static void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t rsa, int64_t csa,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool acc) {
    for (int64_t i = 0; i < M; ++i) {
      float* ci = c + i * ldc;
      if (!acc) std::fill(ci, ci + N, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float aik = a[i * rsa + k * csa];
        const float* bk = b + k * ldb;
        for (int64_t n = 0; n < N; ++n) ci[n] += aik * bk[n];
      }
    }
  }

  static void exp2_tile(float* s, int64_t ld, int64_t M, int64_t N, float mul, const float* row_sub,
                        const float* col_sub, float* col_sum) {
    if (col_sum) std::fill(col_sum, col_sum + N, 0.0f);
    for (int64_t r = 0; r < M; ++r) {
      float* sr = s + r * ld;
      const float rs = row_sub ? row_sub[r] : 0.0f;
      for (int64_t c = 0; c < N; ++c) {
        const float e = std::exp2(mul * sr[c] - rs - (col_sub ? col_sub[c] : 0.0f));
        sr[c] = e;
        if (col_sum) col_sum[c] += e;
      }
    }
  }
};

void scalar_exp2(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp2(x[i]);
}

void check_strides(const char* name, AttentionStrides s) {
  if (s.b < 0 || s.h < 0 || s.t < 0)
    HP_THROW(ValueError, "attention", name, " strides (b=", s.b, ", h=", s.h, ", t=", s.t,
             ") must be non-negative");
}

void check_input(const char* name, const AttentionInput& x) {
  if (!x.data) HP_THROW(ValueError, "attention", name, " is null");
  check_strides(name, x.strides);
}

void check_output(const char* name, const AttentionOutput& x) {
  if (!x.data) HP_THROW(ValueError, "attention", name, " is null");
  check_strides(name, x.strides);
}

void check_problem(const AttentionShape& s, const AttentionOptions& opt) {
  if (s.batch < 0 || s.heads_q < 1 || s.heads_kv < 1 || s.seq_q < 0 || s.seq_kv < 0 ||
      s.head_dim < 1)
    HP_THROW(ValueError, "attention", "bad shape: batch=", s.batch, " heads_q=", s.heads_q,
             " heads_kv=", s.heads_kv, " seq_q=", s.seq_q, " seq_kv=", s.seq_kv,
             " head_dim=", s.head_dim, " (heads and head_dim must be >= 1, the rest >= 0)");
  if (s.heads_q % s.heads_kv != 0)
    HP_THROW(ValueError, "attention", "heads_q=", s.heads_q,
             " is not a multiple of heads_kv=", s.heads_kv);
  if (s.seq_kv == 0 && s.seq_q > 0 && s.batch > 0)
    HP_THROW(ValueError, "attention", "seq_kv=0 with seq_q=", s.seq_q,
             ": softmax over no keys is undefined");
  if (!std::isfinite(opt.scale))
    HP_THROW(ValueError, "attention", "scale=", opt.scale, " is not finite");
  if (opt.dtype != DType::f32)
    HP_THROW(ValueError, "attention", "dtype ", dtype_name(opt.dtype),
             " is not supported (f32 only)");
  if (opt.window < 0 || (opt.window > 0 && !opt.causal))
    HP_THROW(ValueError, "attention", "window=", opt.window,
             opt.window < 0 ? " must be >= 0 (0: no sliding window)"
                            : " needs causal attention (a sliding window looks back only)");
  if (opt.sinks)
    for (int64_t h = 0; h < s.heads_q; ++h)
      if (!std::isfinite(opt.sinks[h]))
        HP_THROW(ValueError, "attention", "sinks[", h, "]=", opt.sinks[h], " is not finite");
}

// Both id arrays or neither; each row non-decreasing (the kernels skip blocks by binary search).
void check_segments(const AttentionShape& s, const AttentionSegments& g) {
  if (!g.q && !g.kv) return;
  if (!g.q || !g.kv)
    HP_THROW(ValueError, "attention", "segments need both query and key ids, got ",
             g.q ? "query" : "key", " ids only");
  if (g.q_stride < s.seq_q || g.kv_stride < s.seq_kv)
    HP_THROW(ValueError, "attention", "segment row strides (q ", g.q_stride, ", kv ", g.kv_stride,
             ") are shorter than the rows (seq_q=", s.seq_q, ", seq_kv=", s.seq_kv, ")");
  for (int64_t b = 0; b < s.batch; ++b)
    for (auto [ids, n] :
         {std::pair{g.q + b * g.q_stride, s.seq_q}, {g.kv + b * g.kv_stride, s.seq_kv}})
      for (int64_t t = 1; t < n; ++t)
        if (ids[t] < ids[t - 1])
          HP_THROW(ValueError, "attention", "segment ids must not decrease along a row: row ", b,
                   " has ", ids[t - 1], " then ", ids[t], " at token ", t, " of the ",
                   ids == g.q + b * g.q_stride ? "queries" : "keys");
}

float resolve_scale(const AttentionShape& s, const AttentionOptions& opt) {
  return opt.scale != 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
}

HeadsView<const float> in_f32(const AttentionInput& x) {
  return {static_cast<const float*>(x.data), x.strides};
}
HeadsView<float> out_f32(const AttentionOutput& x) {
  return {static_cast<float*>(x.data), x.strides};
}

}  // namespace

void attention_exp2(const float* x, float* y, int64_t n) {
  kernel_table<AttentionKernels>().exp2(x, y, n);
}

}  // namespace detail

template <>
const detail::AttentionKernels* isa_table<detail::AttentionKernels, Isa::scalar>() {
  using Flash = detail::FlashAttention<detail::ScalarOps>;
  static constexpr detail::AttentionKernels k{&Flash::forward, &Flash::backward,
                                              &detail::scalar_exp2};
  return &k;
}

namespace detail {
namespace {

// The arguments both passes share: shape, mask, scale and the q, k, v views.
AttentionF32Args common_args(const AttentionShape& shape, const AttentionOptions& options,
                             AttentionInput q, AttentionInput k, AttentionInput v) {
  check_segments(shape, options.segments);
  AttentionF32Args a{};
  a.shape = shape;
  a.causal = options.causal;
  // A window wider than both lengths hides nothing; capping it keeps the block arithmetic
  // (k0 + nk − 1 + window) far from overflow for any int64 a config can hold.
  a.window = std::min(options.window, shape.seq_q + shape.seq_kv);
  a.sinks = options.sinks;
  a.seg = options.segments;
  a.scale = resolve_scale(shape, options);
  a.q = in_f32(q);
  a.k = in_f32(k);
  a.v = in_f32(v);
  return a;
}

}  // namespace
}  // namespace detail

void attention_forward(const AttentionShape& shape, const AttentionOptions& options,
                       AttentionInput q, AttentionInput k, AttentionInput v, AttentionOutput o,
                       float* lse) {
  detail::check_problem(shape, options);
  detail::check_input("q", q);
  detail::check_input("k", k);
  detail::check_input("v", v);
  detail::check_output("o", o);
  if (!lse) HP_THROW(ValueError, "attention", "lse is null");
  if (shape.batch == 0 || shape.seq_q == 0) return;
  detail::AttentionF32Args a = detail::common_args(shape, options, q, k, v);
  a.out = detail::out_f32(o);
  a.lse_out = lse;
  kernel_table<detail::AttentionKernels>().forward(a);
}

void attention_backward(const AttentionShape& shape, const AttentionOptions& options,
                        AttentionInput q, AttentionInput k, AttentionInput v, AttentionInput o,
                        const float* lse, AttentionInput dout, AttentionOutput dq,
                        AttentionOutput dk, AttentionOutput dv, const float* dlse,
                        float* dsinks) {
  detail::check_problem(shape, options);
  if (options.sinks && !dsinks)
    HP_THROW(ValueError, "attention", "sinks are given but dsinks (their gradient) is null");
  for (auto [name, x] : {std::pair{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"dout", dout}})
    detail::check_input(name, x);
  for (auto [name, x] : {std::pair{"dq", dq}, {"dk", dk}, {"dv", dv}})
    detail::check_output(name, x);
  if (!lse) HP_THROW(ValueError, "attention", "lse is null");
  if (options.sinks) std::fill(dsinks, dsinks + shape.heads_q, 0.0f);
  // seq_q == 0 still runs: dk and dv are then zero.
  if (shape.batch == 0 || (shape.seq_q == 0 && shape.seq_kv == 0)) return;
  detail::AttentionF32Args a = detail::common_args(shape, options, q, k, v);
  a.o = detail::in_f32(o);
  a.dout = detail::in_f32(dout);
  a.dq = detail::out_f32(dq);
  a.dk = detail::out_f32(dk);
  a.dv = detail::out_f32(dv);
  a.lse = lse;
  a.dlse = dlse;
  a.dsinks = options.sinks ? dsinks : nullptr;
  kernel_table<detail::AttentionKernels>().backward(a);
}

}  // namespace hp::kernels
