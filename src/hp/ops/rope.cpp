// rotary_embedding (forward: rotate by θ; backward: rotate the gradient by -θ) and rope_cos_sin.
#include "hp/kernels/cpu/rope.h"

#include <cmath>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/ops/checks.h"
#include "hp/ops/ops.h"

namespace hp {

using autograd::SavedTensor;

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved,
                        int64_t seq_dim) {
  HP_PROFILE_OP("rotary_embedding");
  const char* op = "rotary_embedding";
  detail::check_float_tensor(x, op, "x");
  if (!cos.defined() || !sin.defined()) HP_THROW(ValueError, op, "undefined cos/sin");
  const DType dt = x.dtype();
  if (x.dim() < 2) HP_THROW(ValueError, op, "x must have at least 2 dims, got ", x.desc());
  const int64_t sd = wrap_dim(seq_dim, x.dim(), "seq_dim");
  if (sd == x.dim() - 1)
    HP_THROW(ValueError, op, "seq_dim ", seq_dim, " is the rotated (last) dim of x ", x.desc());
  const int64_t d = x.shape().back();
  if (d % 2 != 0) HP_THROW(ValueError, op, "last dim of x must be even, got ", x.desc());
  const Shape want{x.shape()[sd], d / 2};
  const Shape per_row{x.shape()[0], x.shape()[sd], d / 2};  // positions per row (seq_dim >= 1)
  for (const Tensor* t : {&cos, &sin}) {
    if (t->shape() != want && (sd == 0 || t->shape() != per_row || cos.dim() != sin.dim()))
      HP_THROW(ValueError, op, t == &cos ? "cos" : "sin", " must be [T, D/2] = ", shape_str(want),
               sd == 0 ? std::string() : " or [B, T, D/2] = " + shape_str(per_row), " for x ",
               x.desc(), " with seq_dim ", seq_dim, ", got ", t->desc());
    if (!is_floating(t->dtype()))
      HP_THROW(ValueError, op, "cos/sin must be floating, got ", t->desc());
  }
  const Tensor xc = x.contiguous();
  Tensor y = empty(x.shape(), dt);
  kernels::rope(xc, cos, sin, y, interleaved, sd, /*inverse=*/false);
  if (autograd::needs_grad({x})) {
    SavedTensor sc(cos), ss(sin);
    autograd::record(op, {x}, {y}, [=](const std::vector<Tensor>& g) {
      // The rotation is orthogonal: its transpose is the rotation by -θ.
      Tensor gc = g[0].dtype() == dt ? g[0].contiguous() : g[0].to(dt);
      Tensor dx = empty(gc.shape(), dt);
      kernels::rope(gc, sc.unpack(), ss.unpack(), dx, interleaved, sd, /*inverse=*/true);
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

std::pair<Tensor, Tensor> rope_cos_sin(int64_t seq_len, int64_t head_dim, double theta_base,
                                       DType dt) {
  if (seq_len < 0 || head_dim <= 0 || head_dim % 2 != 0 || !(theta_base > 0))
    HP_THROW(ValueError, "rope_cos_sin",
             "needs seq_len >= 0, even head_dim > 0, theta_base > 0; got ", seq_len, ", ", head_dim,
             ", ", theta_base);
  const int64_t half = head_dim / 2;
  std::vector<double> c(static_cast<size_t>(seq_len * half)), s(c.size());
  for (int64_t i = 0; i < half; ++i) {
    // inv_freq_i = base^(-2i/D), as HF's default rope (which computes it in f32).
    const double inv_freq =
        std::pow(theta_base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (int64_t t = 0; t < seq_len; ++t) {
      const double a = static_cast<double>(t) * inv_freq;
      c[static_cast<size_t>(t * half + i)] = std::cos(a);
      s[static_cast<size_t>(t * half + i)] = std::sin(a);
    }
  }
  return {from_vector(c, {seq_len, half}, dt), from_vector(s, {seq_len, half}, dt)};
}

std::pair<Tensor, Tensor> rope_cos_sin_from_inv_freq(const std::vector<double>& inv_freq,
                                                     int64_t start, int64_t seq_len, double scale,
                                                     DType dt) {
  if (start < 0 || seq_len < 0 || inv_freq.empty())
    HP_THROW(ValueError, "rope_cos_sin",
             "needs start >= 0, seq_len >= 0 and a non-empty inv_freq; got ", start, ", ", seq_len,
             ", ", inv_freq.size(), " frequencies");
  const auto half = static_cast<int64_t>(inv_freq.size());
  std::vector<double> c(static_cast<size_t>(seq_len * half)), s(c.size());
  for (int64_t t = 0; t < seq_len; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(start + t) * inv_freq[static_cast<size_t>(i)];
      c[static_cast<size_t>(t * half + i)] = std::cos(a) * scale;
      s[static_cast<size_t>(t * half + i)] = std::sin(a) * scale;
    }
  return {from_vector(c, {seq_len, half}, dt), from_vector(s, {seq_len, half}, dt)};
}

}  // namespace hp
