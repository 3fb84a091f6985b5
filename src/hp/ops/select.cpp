// max (values + first-occurrence indices) and topk along one dim: the dim is moved last, rows are
// selected by kernels/cpu/select.h, and the gradient of the values is scattered back to the input
// positions the indices name.
#include "hp/kernels/cpu/select.h"

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/index.h"
#include "hp/ops/dim_move.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// [rows, n] contiguous rows of a with dim d last.
Tensor rows_with_dim_last(const Tensor& a, int64_t d) {
  Tensor x = detail::dim_to_last(a, d).contiguous();
  const int64_t n = a.shape()[d];
  const int64_t rows = n == 0 ? 0 : a.numel() / n;
  return x.as_strided({rows, n}, {n, 1}, x.offset());
}

// Records backward = scatter of g (shaped like `index`, dim d) into zeros of a's shape.
void record_scatter_back(const char* name, const Tensor& a, const Tensor& values, int64_t d,
                         const Tensor& index) {
  if (!autograd::needs_grad({a})) return;
  const Shape in_shape = a.shape();
  const DType dt = a.dtype();
  autograd::record(name, {a}, {values}, [=](const std::vector<Tensor>& g) {
    // g has the values' shape; index may carry the kept size-1 dim: same elements, same order.
    const Tensor gc = (g[0].dtype() == dt ? g[0] : g[0].to(dt)).contiguous();
    const Tensor gs = gc.as_strided(index.shape(), contiguous_strides(index.shape()), gc.offset());
    Tensor ga = zeros(in_shape, dt);
    kernels::scatter_add_(ga, d, index, gs, name);
    return std::vector<Tensor>{ga};
  });
}

}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  HP_PROFILE_OP("max");
  detail::check_float_tensor(a, "max");
  const Tensor a1 = a.dim() == 0 ? a.as_strided({1}, {1}, a.offset()) : a;
  const int64_t d = wrap_dim(dim, a1.dim(), "max");
  if (a1.shape()[d] == 0)
    HP_THROW(ValueError, "max", "cannot take the max over empty dim ", d, " of ", a.desc());
  Tensor v, i;  // [rows]
  kernels::max_lastdim(rows_with_dim_last(a1, d), &v, &i);
  Shape keep = a1.shape();
  keep[d] = 1;
  Shape out = keep;
  if (!keepdim || a.dim() == 0) out.erase(out.begin() + d);
  const Tensor index_keep = i.as_strided(keep, contiguous_strides(keep), 0);
  Tensor values = v.as_strided(out, contiguous_strides(out), 0);
  Tensor indices = i.as_strided(out, contiguous_strides(out), 0);
  if (a.dim() == 0) {
    record_scatter_back("max", a, values, 0, i.as_strided({}, {}, 0));
  } else {
    record_scatter_back("max", a, values, d, index_keep);
  }
  return {values, indices};
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim) {
  HP_PROFILE_OP("topk");
  detail::check_float_tensor(a, "topk");
  if (a.dim() == 0)
    HP_THROW(ValueError, "topk", "input must have at least one dim, got ", a.desc());
  const int64_t d = wrap_dim(dim, a.dim(), "topk");
  if (k < 0 || k > a.shape()[d])
    HP_THROW(ValueError, "topk", "k = ", k, " is out of range [0, ", a.shape()[d], "] for dim ", d,
             " of ", a.desc());
  Tensor v, i;  // [rows, k]
  kernels::topk_lastdim(rows_with_dim_last(a, d), k, &v, &i);
  Shape last = a.shape();
  last.erase(last.begin() + d);
  last.push_back(k);
  const Shape st = contiguous_strides(last);
  Tensor values = detail::last_to_dim(v.as_strided(last, st, 0), d).contiguous();
  Tensor indices = detail::last_to_dim(i.as_strided(last, st, 0), d).contiguous();
  record_scatter_back("topk", a, values, d, indices);
  return {values, indices};
}

}  // namespace hp
