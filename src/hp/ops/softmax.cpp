// softmax, log_softmax and logsumexp: fused row kernels over the last dim (kernels/cpu/softmax.h);
// other dims are moved last (a copy), computed, and moved back.
#include "hp/kernels/cpu/softmax.h"

#include <algorithm>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/reduce.h"
#include "hp/ops/dim_move.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// A 0-d tensor seen as [1], so every op below works on at least one dim.
Tensor at_least_1d(const Tensor& t) {
  return t.dim() == 0 ? t.as_strided({1}, {1}, t.offset()) : t;
}

Tensor softmax_impl(const char* name, const Tensor& a, int64_t dim, bool log) {
  HP_PROFILE_OP(name);
  detail::check_float_tensor(a, name);
  const Tensor a1 = at_least_1d(a);
  const int64_t d = wrap_dim(dim, a1.dim(), name);
  const bool last = d == a1.dim() - 1;
  // [..., n] rows with the softmax dim last.
  Tensor y = kernels::softmax_lastdim(detail::dim_to_last(a1, d).contiguous(), log);
  if (!last) y = detail::last_to_dim(y, d).contiguous();
  if (a.dim() == 0) y = y.as_strided({}, {}, 0);
  if (autograd::needs_grad({a})) {
    autograd::SavedTensor sy(y);
    const Shape in_shape = a.shape();
    autograd::record(name, {a}, {y}, [sy, d, last, log, in_shape](const std::vector<Tensor>& g) {
      const Tensor yv = at_least_1d(sy.unpack()), gv = at_least_1d(g[0]);
      Tensor dx = kernels::softmax_lastdim_backward(detail::dim_to_last(yv, d).contiguous(),
                                                    detail::dim_to_last(gv, d), log);
      if (!last) dx = detail::last_to_dim(dx, d).contiguous();
      return std::vector<Tensor>{dx.as_strided(in_shape, contiguous_strides(in_shape), 0)};
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) {
  return softmax_impl("softmax", a, dim, false);
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  return softmax_impl("log_softmax", a, dim, true);
}

Tensor logsumexp(const Tensor& a, const Dims& dims_in, bool keepdim) {
  HP_PROFILE_OP("logsumexp");
  detail::check_float_tensor(a, "logsumexp");
  const auto dims = kernels::reduce_dims(dims_in, a.dim(), "logsumexp");
  // Kept dims first, reduced dims last, as contiguous rows [O, R].
  Shape shape, strides;
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d))
      shape.push_back(a.shape()[d]), strides.push_back(a.strides()[d]), rows *= a.shape()[d];
  for (int64_t d : dims)
    shape.push_back(a.shape()[d]), strides.push_back(a.strides()[d]), n *= a.shape()[d];
  Tensor x = a.as_strided(shape, strides, a.offset()).contiguous();
  Tensor lse = kernels::logsumexp_lastdim(x.as_strided({rows, n}, {n, 1}, x.offset()));  // [O]
  const Shape out_shape = kernels::reduced_shape(a.shape(), dims, keepdim);
  Tensor y = lse.as_strided(out_shape, contiguous_strides(out_shape), 0);
  if (autograd::needs_grad({a})) {
    autograd::SavedTensor sa(a), sy(y);
    const Shape in_shape = a.shape();
    const Shape keep_shape = kernels::reduced_shape(in_shape, dims, true);
    autograd::record("logsumexp", {a}, {y}, [=](const std::vector<Tensor>& g) {
      // d lse / dx = exp(x - lse) = softmax over the reduced dims.
      Tensor yb = expand(reshape(sy.unpack(), keep_shape), in_shape);
      Tensor gb = expand(reshape(g[0], keep_shape), in_shape);
      return std::vector<Tensor>{mul(gb, exp(sub(sa.unpack(), yb)))};
    });
  }
  return y;
}

}  // namespace hp
