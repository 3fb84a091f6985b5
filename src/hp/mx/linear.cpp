// mx_linear / mx_grouped_experts: quantize → MX GEMM for the three training GEMMs, recorded on the
// tape with `record` (the spec and group offsets travel in the backward closure).
#include "hp/mx/linear.h"

#include <memory>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/mx/gemm.h"
#include "hp/mx/qtensor.h"
#include "hp/mx/quantize.h"
#include "hp/ops/ops.h"

namespace hp::mx {
namespace {

using autograd::SavedTensor;

using detail::alloc_q;
using detail::check_float;
using detail::defined_only;
using detail::nblk;
using detail::QTensor;

// The state mx_linear's backward needs: the shapes and X column-wise [M, K] (when dW is needed).
struct LinearSaved {
  QuantSpec spec;
  Shape x_shape;
  DType x_dtype;
  int64_t M, N, K;
  bool x_grad, w_grad, b_grad;
  SavedTensor weight, x_col_codes, x_col_scales;
};

std::vector<Tensor> linear_backward(const LinearSaved& s, const Tensor& dy_in) {
  std::vector<Tensor> grads(size_t(2 + (s.b_grad ? 1 : 0)));
  if (!dy_in.defined()) return grads;
  const Tensor dy = dy_in.contiguous();  // [M, N] f32 or bf16
  check_float("mx_linear backward", "grad_output", dy);
  const int64_t M = s.M, N = s.N, K = s.K;
  const ElemFormat e = s.spec.elem;
  QTensor dy_row, dy_col;
  if (s.x_grad) dy_row = alloc_q(M * N, M * nblk(N));
  if (s.w_grad) dy_col = alloc_q(M * N, nblk(M) * N);
  if (s.x_grad && s.w_grad)
    quantize_dual(dy.raw_data(), dy.dtype(), M, N, s.spec, dy_row.c(), dy_row.s(), dy_col.c(),
                  dy_col.s());
  else if (s.x_grad)
    quantize_rowwise(dy.raw_data(), dy.dtype(), M, N, s.spec, dy_row.c(), dy_row.s());
  else if (s.w_grad)
    quantize_colwise(dy.raw_data(), dy.dtype(), M, N, s.spec, dy_col.c(), dy_col.s());
  const Tensor w = s.weight.unpack().contiguous();  // [N, K]
  if (s.x_grad) {
    // W column-wise, requantized from the parameter: codes [N, K], scales [ceil(N/32), K].
    QTensor w_col = alloc_q(N * K, nblk(N) * K);
    quantize_colwise(w.raw_data(), w.dtype(), N, K, s.spec, w_col.c(), w_col.s());
    Tensor dx = empty(s.x_shape, s.x_dtype);  // [M, K]
    mx_gemm(dy_row.op(e, MxLayout::rowwise_k), w_col.op(e, MxLayout::colwise_k), M, K, N,
            dx.raw_data(), s.x_dtype);
    grads[0] = dx;
  }
  if (s.w_grad) {
    const QTensor x_col{s.x_col_codes.unpack(),
                        s.x_col_scales.unpack()};  // [M, K], [ceil(M/32), K]
    Tensor dw = empty({N, K}, w.dtype());
    mx_gemm(dy_col.op(e, MxLayout::colwise_k), x_col.op(e, MxLayout::colwise_k), N, K, M,
            dw.raw_data(), w.dtype());
    grads[1] = dw;
  }
  return grads;
}

}  // namespace

Tensor mx_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, QuantSpec spec) {
  const char* fn = "mx_linear";
  if (!weight.defined() || weight.dim() != 2)
    HP_THROW(ValueError, "mx", fn, ": weight must be [out, in], got ",
             weight.defined() ? weight.desc() : "undefined");
  if (!x.defined() || x.dim() < 1 || x.size(-1) != weight.size(1))
    HP_THROW(ValueError, "mx", fn, ": input ", x.defined() ? x.desc() : "undefined",
             " does not match weight ", weight.desc());
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    HP_THROW(ValueError, "mx", fn, ": bias ", bias.desc(), " does not match weight ",
             weight.desc());
  check_float(fn, "input", x);
  check_float(fn, "weight", weight);
  const int64_t N = weight.size(0), K = weight.size(1);
  int64_t M = 1;  // rows of x flattened to [M, K]
  for (int64_t d = 0; d + 1 < x.dim(); ++d) M *= x.size(d);
  const bool grad = autograd::needs_grad(defined_only({x, weight, bias}));
  auto saved = std::make_shared<LinearSaved>();
  *saved = LinearSaved{spec,
                       x.shape(),
                       x.dtype(),
                       M,
                       N,
                       K,
                       grad && x.requires_grad(),
                       grad && weight.requires_grad(),
                       bias.defined(),
                       {},
                       {},
                       {}};

  const Tensor xc = x.contiguous(), wc = weight.contiguous();
  const ElemFormat e = spec.elem;
  QTensor x_row = alloc_q(M * K, M * nblk(K)), w_row = alloc_q(N * K, N * nblk(K));
  if (saved->w_grad) {
    // X column-wise is what wgrad reads: codes [M, K], scales [ceil(M/32), K].
    QTensor x_col = alloc_q(M * K, nblk(M) * K);
    quantize_dual(xc.raw_data(), xc.dtype(), M, K, spec, x_row.c(), x_row.s(), x_col.c(),
                  x_col.s());
    saved->x_col_codes = SavedTensor(x_col.codes);
    saved->x_col_scales = SavedTensor(x_col.scales);
  } else {
    quantize_rowwise(xc.raw_data(), xc.dtype(), M, K, spec, x_row.c(), x_row.s());
  }
  quantize_rowwise(wc.raw_data(), wc.dtype(), N, K, spec, w_row.c(), w_row.s());

  Shape y_shape(x.shape().begin(), x.shape().end() - 1);
  y_shape.push_back(N);
  Tensor y = empty(y_shape, x.dtype());            // [M, N]
  if (bias.defined()) y.copy_from(bias.detach());  // broadcast; the GEMM accumulates onto it
  mx_gemm(x_row.op(e, MxLayout::rowwise_k), w_row.op(e, MxLayout::rowwise_k), M, N, K, y.raw_data(),
          y.dtype(), 1.0f, bias.defined() ? 1.0f : 0.0f);

  if (grad) {
    saved->weight = SavedTensor(weight);
    const Shape out_flat = {M, N};
    autograd::record("MxLinear", defined_only({x, weight, bias}), {y},
                     [saved, out_flat](const std::vector<Tensor>& g) {
                       const LinearSaved& s = *saved;
                       Tensor dy = g[0].defined() ? reshape(g[0].detach(), out_flat) : Tensor();
                       std::vector<Tensor> grads = linear_backward(s, dy);
                       if (s.b_grad && dy.defined()) grads[2] = sum(dy, {0});
                       if (grads[0].defined()) grads[0] = reshape(grads[0], s.x_shape);
                       return grads;
                     });
  }
  return y;
}

}  // namespace hp::mx
