// rms_norm and layer_norm: fused kernels (kernels/cpu/norm.h) forward and backward. Only x, the
// parameters and the per-row statistics (rstd, mean) are saved for backward.
#include "hp/kernels/cpu/norm.h"

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/ops/checks.h"
#include "hp/ops/ops.h"

namespace hp {

using autograd::SavedTensor;
using kernels::NormKind;

namespace {

void check_norm_input(const Tensor& x, const char* op) {
  detail::check_float_tensor(x, op);
  if (x.dim() < 1) HP_THROW(ValueError, op, "expects at least 1 dim, got ", x.desc());
}

void check_param(const Tensor& p, const Tensor& x, const char* op, const char* what) {
  if (!p.defined()) return;
  if (p.dim() != 1 || p.shape()[0] != x.shape().back())
    HP_THROW(ValueError, op, what, " must be [", x.shape().back(), "] to match x ", x.desc(),
             ", got ", p.desc());
  detail::check_float_tensor(p, op, what);
}

Tensor norm(NormKind kind, const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
            double eps) {
  HP_PROFILE_OP(op);
  check_norm_input(x, op);
  check_param(w, x, op, "weight");
  check_param(b, x, op, "bias");
  if (!(eps >= 0)) HP_THROW(ValueError, op, "eps must be >= 0, got ", eps);
  const Tensor xc = x.contiguous();
  kernels::NormForward fw = kernels::norm_forward(kind, xc, w, b, eps);
  if (autograd::needs_grad({x, w, b})) {
    const bool gx = x.requires_grad(), gw = w.defined() && w.requires_grad(),
               gb = b.defined() && b.requires_grad();
    const DType b_dtype = b.defined() ? b.dtype() : DType::f32;
    SavedTensor sx(xc), sw(w), smean(fw.mean), srstd(fw.rstd);
    autograd::record(op, {x, w, b}, {fw.y}, [=](const std::vector<Tensor>& g) {
      kernels::NormGrads gr =
          kernels::norm_backward(kind, g[0], sx.unpack(), sw.unpack(), smean.unpack(),
                                 srstd.unpack(), gx, gw, gb, b_dtype);
      return std::vector<Tensor>{gr.dx, gr.dw, gr.db};
    });
  }
  return fw.y;
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return norm(NormKind::rms, "rms_norm", x, weight, Tensor(), eps);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return norm(NormKind::layer, "layer_norm", x, weight, bias, eps);
}

}  // namespace hp
