#include "hp/models/sink_attention.h"

#include <limits>

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

Tensor sliding_window_bias(int64_t t, int64_t window, int64_t past) {
  const int64_t s = past + t;
  std::vector<double> m(static_cast<size_t>(t * s), -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j <= past + i; ++j)
      if (window <= 0 || past + i - j < window) m[static_cast<size_t>(i * s + j)] = 0.0;
  return from_vector(m, {t, s}, DType::f32);
}

}  // namespace hp::models
