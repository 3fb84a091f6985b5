// Attention with an additive bias and per-head sink logits (gpt-oss / DeepSeek-V4 style), and
// the sliding-window causal bias: general building blocks for architectures whose keys are not
// one plain causal sequence (DeepSeek-V4 appends compressed entries with their own visibility).
//
// biased_attention is composed from differentiable ops (matmul, softmax, cat): the [B, H, T, S]
// scores are materialized, so it is the reference for tests; window_sink_attention is the fast
// path (the flash kernel's sliding window and sinks, extra keys merged by the row lse).
#pragma once

#include "hp/core/tensor.h"

namespace hp::models {

// softmax over [q·kᵀ · scale + bias | sink_h] per row, the sink column dropped, times v:
// q [B, H, T, d], k / v [B, Hk, S, d] (Hk = 1 or H), bias broadcastable to [B, H, T, S] (0 or
// -inf entries; every row may be all -inf when sinks are given), sinks [H] (undefined: none).
// Returns [B, H, T, d].
Tensor biased_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& sinks, double scale);

// Causal sliding-window attention with sinks over k / v [B, Hk, T, d] (the flash kernel: no
// [T, T] scores), plus optionally `extra` keys = values [B, 1, n, d] (DeepSeek-V4's compressed
// entries) visible per query by `extra_bias` (0 / -inf, broadcastable to [B, 1, T, n]).
// Composition: with the kernel's o_w and row lse_w (sinks included), the result is
// softmax([q·extraᵀ · scale + extra_bias | lse_w]) · [extra | o_w] — exactly softmax over
// [window keys | extra keys | sink] — so only [B, H, T, n] extra scores are materialized.
// window <= 0: plain causal. q [B, H, T, d]; returns [B, H, T, d].
Tensor window_sink_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                             const Tensor& sinks, double scale, const Tensor& extra = Tensor(),
                             const Tensor& extra_bias = Tensor());

// f32 [T, past + T]: 0 where key j is visible to query i (j <= past + i and past + i − j <
// window), -inf elsewhere (transformers' sliding_window: each query sees itself and the
// window − 1 tokens before it). The keys are `past` cached tokens followed by the T queries'
// own (decoding). window <= 0: plain causal.
Tensor sliding_window_bias(int64_t t, int64_t window, int64_t past = 0);

}  // namespace hp::models
