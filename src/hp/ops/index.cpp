// gather, scatter_add, index_select, index_add and embedding (kernels/cpu/index.h), each with its
// backward: the gather-like ops scatter the gradient back with a deterministic add, the add-like
// ops gather it.
#include "hp/kernels/cpu/index.h"

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

Tensor as_dtype(const Tensor& g, DType dt) {
  return g.dtype() == dt ? g : g.to(dt);
}

int64_t index_dim(const Tensor& a, int64_t dim, const char* op) {
  return a.dim() == 0 ? 0 : wrap_dim(dim, a.dim(), op);
}

}  // namespace

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  HP_PROFILE_OP("gather");
  Tensor y = kernels::gather(a, dim, index, "gather");
  if (autograd::needs_grad({a})) {
    const int64_t d = index_dim(a, dim, "gather");
    const Shape in_shape = a.shape();
    const DType dt = a.dtype();
    autograd::record("gather", {a}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor ga = zeros(in_shape, dt);
      kernels::scatter_add_(ga, d, index, as_dtype(g[0], dt), "gather_backward");
      return std::vector<Tensor>{ga};
    });
  }
  return y;
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  HP_PROFILE_OP("scatter_add");
  Tensor y = kernels::scatter_add(a, dim, index, src, "scatter_add");
  if (autograd::needs_grad({a, src})) {
    const int64_t d = index_dim(a, dim, "scatter_add");
    const Shape src_shape = src.shape();
    const DType dt = src.dtype();
    const bool ga = a.requires_grad(), gs = src.requires_grad();
    autograd::record("scatter_add", {a, src}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor gsrc;
      if (gs) {
        // src elements outside index's extent were never added: their gradient is 0.
        Tensor picked = kernels::gather(as_dtype(g[0], dt), d, index, "scatter_add_backward");
        if (index.shape() == src_shape) {
          gsrc = picked;
        } else {
          gsrc = zeros(src_shape, dt);
          gsrc.as_strided(index.shape(), gsrc.strides(), 0).copy_from(picked);
        }
      }
      return std::vector<Tensor>{ga ? g[0] : Tensor(), gsrc};
    });
  }
  return y;
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  HP_PROFILE_OP("index_select");
  Tensor y = kernels::index_select(a, dim, index, "index_select");
  if (autograd::needs_grad({a})) {
    const int64_t d = wrap_dim(dim, a.dim(), "index_select");
    const Shape in_shape = a.shape();
    const DType dt = a.dtype();
    const Tensor idx = reshape(index, {-1});
    autograd::record("index_select", {a}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor ga = zeros(in_shape, dt);
      kernels::index_add_(ga, d, idx, as_dtype(g[0], dt), "index_select_backward");
      return std::vector<Tensor>{ga};
    });
  }
  return y;
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  HP_PROFILE_OP("index_add");
  Tensor y = kernels::index_add(a, dim, index, src, "index_add");
  if (autograd::needs_grad({a, src})) {
    const int64_t d = wrap_dim(dim, a.dim(), "index_add");
    const DType dt = src.dtype();
    const bool ga = a.requires_grad(), gs = src.requires_grad();
    autograd::record("index_add", {a, src}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor gsrc;
      if (gs) gsrc = kernels::index_select(as_dtype(g[0], dt), d, index, "index_add_backward");
      return std::vector<Tensor>{ga ? g[0] : Tensor(), gsrc};
    });
  }
  return y;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  HP_PROFILE_OP("embedding");
  if (!weight.defined() || weight.dim() != 2)
    HP_THROW(ValueError, "embedding", "weight must be [V, D], got ",
             weight.defined() ? weight.desc() : "undefined");
  if (!ids.defined() || (ids.dtype() != DType::i64 && ids.dtype() != DType::i32))
    HP_THROW(ValueError, "embedding", "ids must be i64 or i32, got ",
             ids.defined() ? ids.desc() : "undefined");
  const Tensor ic = ids.contiguous();
  const Tensor flat_ids = ic.as_strided({ic.numel()}, {1}, ic.offset());  // [n]
  const int64_t dim = weight.shape()[1];
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  Tensor rows = kernels::index_select(weight, 0, flat_ids, "embedding");  // [n, D]
  Tensor y = rows.as_strided(out_shape, contiguous_strides(out_shape), 0);
  if (autograd::needs_grad({weight})) {
    const Shape w_shape = weight.shape();
    const DType dt = weight.dtype();
    autograd::record("embedding", {weight}, {y}, [=](const std::vector<Tensor>& g) {
      // Deterministic: every weight row sums its tokens' gradients in token order (index_add).
      const Tensor gc = as_dtype(g[0], dt).contiguous();
      const Tensor g2 = gc.as_strided({flat_ids.numel(), dim}, {dim, 1}, gc.offset());
      Tensor gw = zeros(w_shape, dt);  // [V, D]
      kernels::index_add_(gw, 0, flat_ids, g2, "embedding_backward");
      return std::vector<Tensor>{gw};
    });
  }
  return y;
}

}  // namespace hp
