// scaled_dot_product_attention's general form (ops.h has the plain one): sliding window, sinks and
// the row log-sum-exp as a differentiable output. Its own header so that ops.h, included by every
// file, stays small.
#pragma once

#include <optional>

#include "hp/core/tensor.h"

namespace hp {

// q [B, Hq, T, D], k/v [B, Hkv, S, D] as in scaled_dot_product_attention (ops.h), plus a sliding
// window (causal only: query i sees keys i − window < j <= i; 0 = none), per-q-head sink logits `sinks` [Hq] (in the softmax denominator only; differentiable,
// undefined = none), and the row log-sum-exp lse [B, Hq, T] f32 (sink included) as a second,
// differentiable output, so attention over several key sets can be merged exactly (a query that
// sees no key and has no sink gets o = 0, lse = -inf).
struct AttentionOpts {
  bool causal = true;
  std::optional<double> scale;
  Tensor segments;
  int64_t window = 0;
  Tensor sinks;
};
struct AttentionOut {
  Tensor out;  // [B, Hq, T, D], q's dtype
  Tensor lse;  // [B, Hq, T] f32 (f64 for f64 inputs)
};
AttentionOut scaled_dot_product_attention_lse(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOpts& opts);

}  // namespace hp
