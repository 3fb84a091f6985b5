#include "hp/models/sink_attention.h"

#include <algorithm>
#include <limits>

#include "hp/ops/attention.h"
#include "hp/ops/ops.h"

namespace hp::models {

Tensor biased_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& sinks, double scale) {
  HP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "biased_attention: q ", q.desc(), ", k ",
           k.desc(), ", v ", v.desc());
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2);
  Tensor scores = mul(matmul(q, transpose(k, -1, -2)), scale);  // [B, H, T, S]
  if (bias.defined())
    scores = add(scores, bias.dtype() == scores.dtype() ? bias : cast(bias, scores.dtype()));
  if (sinks.defined()) {
    const Tensor s = sinks.dtype() == scores.dtype() ? sinks : cast(sinks, scores.dtype());
    scores = cat({scores, expand(view(s, {1, h, 1, 1}), {b, h, t, 1})}, -1);
  }
  Tensor p = softmax(scores, -1);
  if (sinks.defined()) p = narrow(p, -1, 0, p.size(-1) - 1);
  return matmul(p, v);
}

Tensor window_sink_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                             const Tensor& sinks, double scale, const Tensor& extra,
                             const Tensor& extra_bias) {
  AttentionOpts opts;
  opts.scale = scale;
  opts.window = std::max<int64_t>(window, 0);
  opts.sinks = sinks;
  const AttentionOut w = scaled_dot_product_attention_lse(q, k, v, opts);
  if (!extra.defined() || extra.size(2) == 0) return w.out;
  const int64_t n = extra.size(2);
  Tensor s = mul(matmul(q, transpose(extra, -1, -2)), scale);  // [B, H, T, n]
  if (extra_bias.defined())
    s = add(s, extra_bias.dtype() == s.dtype() ? extra_bias : cast(extra_bias, s.dtype()));
  const Tensor lse = w.lse.dtype() == s.dtype() ? w.lse : cast(w.lse, s.dtype());
  const Tensor p = softmax(cat({s, unsqueeze(lse, -1)}, -1), -1);  // [B, H, T, n + 1]
  return add(matmul(narrow(p, -1, 0, n), extra), mul(narrow(p, -1, n, 1), w.out));
}

Tensor sliding_window_bias(int64_t t, int64_t window, int64_t past) {
  const int64_t s = past + t;
  std::vector<double> m(static_cast<size_t>(t * s), -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j <= past + i; ++j)
      if (window <= 0 || past + i - j < window) m[static_cast<size_t>(i * s + j)] = 0.0;
  return from_vector(m, {t, s}, DType::f32);
}

}  // namespace hp::models
