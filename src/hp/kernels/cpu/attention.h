// Causal / full scaled-dot-product attention, flash style (FlashAttention-2 blocking), forward and
// fused backward, at raw-pointer level. The autograd op wraps these.
//
// Shapes: q, o, do, dq are [B, Hq, T, D]; k, v, dk, dv are [B, Hkv, T_kv, D]; lse is [B, Hq, T]
// (contiguous f32, natural log). Hq % Hkv == 0: q head h reads kv head h / (Hq / Hkv)
// (grouped-query attention). Each q/k/v/o/grad operand is a base pointer plus element strides for
// (b, h, t) with d contiguous, so [B,H,T,D] and [B,T,H,D] layouts both work without a transpose
// copy.
//
// Causal masking is top-left aligned: query i sees keys j <= i (PyTorch's is_causal, which equals
// the usual convention when T == T_kv). With T > T_kv, queries i >= T_kv see every key; with
// T < T_kv, keys j >= T are never seen (their dk, dv are zero). Every query sees key 0, so no row
// is empty — unless document segments (below) hide every key a query would see: such a query gets
// o = 0, lse = -inf and contributes no gradient.
//
// Document segments (packed rows, AttentionOptions::segments): query i of row b also needs
// seg_q[b, i] == seg_kv[b, j] to see key j, so attention stays inside each packed document
// (block-diagonal causal). Ids are non-decreasing along a row (documents in stream order), which
// lets both passes skip every key block before a query block's first document and after its last
// one: a row of n documents of length T/n costs about 1/n of the causal work.
//
// Sliding window (AttentionOptions::window = W > 0, causal only): query i also needs i − j < W, so
// it sees itself and the W − 1 keys before it (transformers' sliding_window); both passes skip key
// blocks wholly outside the window, so the cost is O(T · W) rather than O(T · T_kv).
//
// Sinks (AttentionOptions::sinks, gpt-oss / DeepSeek-V4): a per-q-head logit z_h that joins each
// row's softmax denominator but has no value: o_i = Σ_j e^{s_ij} v_j / (Σ_j e^{s_ij} + e^{z_h}).
// lse includes it (lse_i = log(Σ_j e^{s_ij} + e^{z_h})), so a query that sees no key gets o = 0 and
// lse = z_h. attention_backward then also writes dsinks[h] = −Σ_{b,i} e^{z_h − lse} · δ_i with
// δ_i = do_i·o_i − dlse_i.
//
// lse gradient (attention_backward's dlse, [B, Hq, T], optional): the gradient of a loss that
// also depends on lse (merging attention states over several key sets, see models/ use). It
// enters as ds_ij = p_ij (dp_ij − δ_i), δ_i = do_i·o_i − dlse_i.
//
// Memory: no [T, T_kv] score matrix; forward needs O(block) scratch per work item; backward adds
// two [B, Hq, T] f32 buffers and C partial dq sums [C, B, Hq, T, Dp] f32 (Dp: D rounded up to
// the kernel's vector width, 8 or 16 floats), with C = min(ceil(16 / (B·Hkv)), ceil(T_kv / 64))
// (1 once B·Hkv >= 16). Results do not depend on the thread count: every output element is
// produced by one work item in a fixed order, and the dq partials are summed in chunk order; no
// atomics. They do depend on the ISA (kernels/cpu/isa.h): AVX-512, AVX2 and the scalar path
// round differently.
#pragma once

#include <cstdint>

#include "hp/core/dtype.h"

namespace hp::kernels {

// Element strides of the (batch, head, token) dims of one operand; the head dim is contiguous.
struct AttentionStrides {
  int64_t b = 0;
  int64_t h = 0;
  int64_t t = 0;
};

// Strides of a contiguous [B, H, T, D] tensor.
inline AttentionStrides attention_strides_bhtd(int64_t heads, int64_t seq, int64_t head_dim) {
  return {heads * seq * head_dim, seq * head_dim, head_dim};
}
// Strides of a contiguous [B, T, H, D] tensor (the layout a fused QKV projection produces).
inline AttentionStrides attention_strides_bthd(int64_t heads, int64_t seq, int64_t head_dim) {
  return {seq * heads * head_dim, head_dim, heads * head_dim};
}

// A read-only operand (q, k, v, o, do).
struct AttentionInput {
  const void* data = nullptr;
  AttentionStrides strides;
};
// A written operand (o, dq, dk, dv); overwritten, never accumulated into. Must not alias an input.
struct AttentionOutput {
  void* data = nullptr;
  AttentionStrides strides;
};

struct AttentionShape {
  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t seq_q = 0;   // T
  int64_t seq_kv = 0;  // T_kv
  int64_t head_dim = 0;
};

// Per-token document ids of the queries and keys (i32, non-decreasing along each row); q null =
// no segments. seg_q[b, i] is q[b * q_stride + i], seg_kv[b, j] is kv[b * kv_stride + j].
struct AttentionSegments {
  const int32_t* q = nullptr;  // [B, T]
  int64_t q_stride = 0;
  const int32_t* kv = nullptr;  // [B, T_kv]
  int64_t kv_stride = 0;
};

struct AttentionOptions {
  bool causal = true;            // top-left aligned, see above
  float scale = 0.0f;            // softmax scale; 0 means 1/sqrt(head_dim)
  DType dtype = DType::f32;      // of every operand but lse (always f32); only f32 is implemented
  AttentionSegments segments{};  // packed documents; none by default
  int64_t window = 0;            // sliding window (causal only), 0 = none; see above
  const float* sinks = nullptr;  // [Hq] f32 sink logits (natural-log units, unscaled) or none
};

// o = softmax(scale · q kᵀ + mask) v; lse[b, h, i] = log Σ_j exp(scale · q_i · k_j) over visible j
// (plus exp(sinks[h]) with sinks).
void attention_forward(const AttentionShape& shape, const AttentionOptions& options,
                       AttentionInput q, AttentionInput k, AttentionInput v, AttentionOutput o,
                       float* lse);

// Given the forward's o and lse and the output gradient do (and optionally the lse gradient dlse
// [B, Hq, T]), writes dq, dk, dv (overwritten) and, with options.sinks, dsinks [Hq] (required
// then, overwritten).
void attention_backward(const AttentionShape& shape, const AttentionOptions& options,
                        AttentionInput q, AttentionInput k, AttentionInput v, AttentionInput o,
                        const float* lse, AttentionInput dout, AttentionOutput dq,
                        AttentionOutput dk, AttentionOutput dv, const float* dlse = nullptr,
                        float* dsinks = nullptr);

namespace detail {
// exp2 of the active backend's attention kernels (kernels/registry.h), exposed for its accuracy
// test: relative error <= 2e-7 for x in [-126, 127]; results below 2^-126 flush to zero (SIMD) or
// stay subnormal (scalar); -inf gives 0.
void attention_exp2(const float* x, float* y, int64_t n);
}  // namespace detail

}  // namespace hp::kernels
