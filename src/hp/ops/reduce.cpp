// Sum, mean, sum_to and amax with their backward (broadcast the gradient back).
#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/reduce.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// g reshaped so that it broadcasts against the input (reduced dims back as size 1), then expanded.
Tensor expand_back(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& dims) {
  Shape keep = kernels::reduced_shape(in_shape, dims, /*keepdim=*/true);
  return expand(reshape(g, keep), in_shape);
}

void check_reducible(const Tensor& a, const char* op) {
  if (!a.defined()) HP_THROW(ValueError, op, "undefined input");
  if (!is_floating(a.dtype())) HP_THROW(ValueError, op, "expects a floating tensor, got ", a.desc());
}

}  // namespace

Tensor sum(const Tensor& a, const Dims& dims_in, bool keepdim) {
  HP_PROFILE_OP("sum");
  check_reducible(a, "sum");
  const auto dims = kernels::reduce_dims(dims_in, a.dim(), "sum");
  Tensor y = kernels::reduce(kernels::ReduceOp::sum, a, dims, keepdim, a.dtype());
  const Shape in_shape = a.shape();
  autograd::record("sum", {a}, {y}, [in_shape, dims](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{contiguous(expand_back(g[0], in_shape, dims))};
  });
  return y;
}

Tensor sum(const Tensor& a) { return sum(a, {}, false); }

Tensor mean(const Tensor& a, const Dims& dims_in, bool keepdim) {
  HP_PROFILE_OP("mean");
  check_reducible(a, "mean");
  const auto dims = kernels::reduce_dims(dims_in, a.dim(), "mean");
  int64_t n = 1;
  for (int64_t d : dims) n *= a.shape()[d];
  return mul(sum(a, dims, keepdim), 1.0 / static_cast<double>(n));
}

Tensor mean(const Tensor& a) { return mean(a, {}, false); }

Tensor sum_to(const Tensor& a, const Shape& shape) {
  HP_PROFILE_OP("sum_to");
  if (a.shape() == shape) return a;
  const int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  if (lead < 0) HP_THROW(ValueError, "sum_to", "cannot sum ", a.desc(), " to ", shape_str(shape));
  Dims dims;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && a.shape()[d] != 1) {
      dims.push_back(d);
    } else if (shape[d - lead] != a.shape()[d]) {
      HP_THROW(ValueError, "sum_to", "cannot sum ", a.desc(), " to ", shape_str(shape));
    }
  }
  if (dims.empty()) return reshape(a, shape);
  return reshape(sum(a, dims, true), shape);
}

Tensor amax(const Tensor& a, const Dims& dims_in, bool keepdim) {
  HP_PROFILE_OP("amax");
  check_reducible(a, "amax");
  const auto dims = kernels::reduce_dims(dims_in, a.dim(), "amax");
  Tensor y = kernels::reduce(kernels::ReduceOp::max, a, dims, keepdim, a.dtype());
  if (autograd::needs_grad({a})) {
    autograd::SavedTensor sa(a), sy(y);
    const Shape in_shape = a.shape();
    autograd::record("amax", {a}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor x = sa.unpack();
      Tensor m = expand_back(sy.unpack(), in_shape, dims);
      // Ties share the gradient evenly, as torch.amax.
      Tensor mask = kernels::elementwise(kernels::EwOp::eq_mask, x, m, x.dtype());
      Tensor count = sum(mask, dims, true);
      return std::vector<Tensor>{div(mul(mask, expand_back(g[0], in_shape, dims)), count)};
    });
  }
  return y;
}

}  // namespace hp
