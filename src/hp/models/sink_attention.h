// Attention with an additive bias and per-head sink logits (gpt-oss / DeepSeek-V4 style), and
// the sliding-window causal bias: general building blocks for architectures whose keys are not
// one plain causal sequence (DeepSeek-V4 appends compressed entries with their own visibility).
//
// Composed from differentiable ops (matmul, softmax, cat): the [B, H, T, S] scores are
// materialized, so it suits the short rows of tests and small models; the flash kernel
// (scaled_dot_product_attention) stays the path for plain causal attention.
#pragma once

#include "hp/core/tensor.h"

namespace hp::models {

// softmax over [q·kᵀ · scale + bias | sink_h] per row, the sink column dropped, times v:
// q [B, H, T, d], k / v [B, Hk, S, d] (Hk = 1 or H), bias broadcastable to [B, H, T, S] (0 or
// -inf entries; every row may be all -inf when sinks are given), sinks [H] (undefined: none).
// Returns [B, H, T, d].
Tensor biased_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& sinks, double scale);

// f32 [T, past + T]: 0 where key j is visible to query i (j <= past + i and past + i − j <
// window), -inf elsewhere (transformers' sliding_window: each query sees itself and the
// window − 1 tokens before it). The keys are `past` cached tokens followed by the T queries'
// own (decoding). window <= 0: plain causal.
Tensor sliding_window_bias(int64_t t, int64_t window, int64_t past = 0);

}  // namespace hp::models
