// Views and shape ops. Views share storage with their input; their backward maps the gradient
// back to the input's shape (reshape, inverse permute, scatter into zeros, or sum over expanded dims).
#include <algorithm>
#include <numeric>
#include <optional>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// Strides for viewing (shape, strides) as `new_shape` without copying, or nullopt (PyTorch's rule:
// each run of merged input dims must be contiguous within itself).
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  if (shape.empty() || shape_numel(shape) == 0) return contiguous_strides(new_shape);
  Shape out(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) HP_THROW(ValueError, op, "only one dim may be -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      HP_THROW(ValueError, op, "invalid dim ", out[i], " in ", shape_str(shape));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      HP_THROW(ValueError, op, "shape ", shape_str(shape), " is invalid for ", numel, " elements");
    out[infer] = numel / known;
  } else if (known != numel) {
    HP_THROW(ValueError, op, "shape ", shape_str(shape), " is invalid for ", numel, " elements");
  }
  return out;
}

// Records a view-like op whose backward is `bwd(g)`.
template <class Bwd>
Tensor recorded(const char* name, const Tensor& a, Tensor y, Bwd bwd) {
  autograd::record(name, {a}, {y}, [bwd](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{bwd(g[0])};
  });
  return y;
}

// Gradient of a strided sub-view: zeros of the input's shape with g written into the same view.
Tensor scatter_into_zeros(const Tensor& g, const Shape& in_shape, DType dt,
                          const std::function<Tensor(const Tensor&)>& same_view) {
  Tensor z = zeros(in_shape, dt);
  same_view(z).copy_from(g);
  return z;
}

}  // namespace

Tensor view(const Tensor& a, const Shape& shape) {
  Shape ns = infer_shape(shape, a.numel(), "view");
  auto st = view_strides(a.shape(), a.strides(), ns);
  if (!st)
    HP_THROW(ValueError, "view", "cannot view ", a.desc(), " with strides ", shape_str(a.strides()),
             " as ", shape_str(ns), " without a copy (use reshape)");
  Shape in_shape = a.shape();
  return recorded("view", a, a.as_strided(ns, *st, a.offset()),
                  [in_shape](const Tensor& g) { return reshape(g, in_shape); });
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  Shape ns = infer_shape(shape, a.numel(), "reshape");
  if (view_strides(a.shape(), a.strides(), ns)) return view(a, ns);
  return view(contiguous(a), ns);
}

Tensor contiguous(const Tensor& a) {
  if (a.is_contiguous()) return a;
  HP_PROFILE_OP("contiguous");
  return recorded("contiguous", a, a.clone(), [](const Tensor& g) { return g; });
}

Tensor permute(const Tensor& a, const Dims& order) {
  const int64_t nd = a.dim();
  if (static_cast<int64_t>(order.size()) != nd)
    HP_THROW(ValueError, "permute", "order has ", order.size(), " dims for ", a.desc());
  Shape shape(nd), strides(nd);
  Dims inverse(nd, -1);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(order[i], nd, "permute");
    if (inverse[d] != -1) HP_THROW(ValueError, "permute", "dim ", d, " repeated in the order");
    inverse[d] = i;
    shape[i] = a.shape()[d];
    strides[i] = a.strides()[d];
  }
  return recorded("permute", a, a.as_strided(shape, strides, a.offset()),
                  [inverse](const Tensor& g) { return permute(g, inverse); });
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  Dims order(a.dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[wrap_dim(d0, a.dim(), "transpose")], order[wrap_dim(d1, a.dim(), "transpose")]);
  return permute(a, order);
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const int64_t d = wrap_dim(dim, a.dim(), "slice");
  const int64_t n = a.shape()[d];
  if (step <= 0) HP_THROW(ValueError, "slice", "step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = a.shape(), strides = a.strides();
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  const int64_t off = a.offset() + start * a.strides()[d];
  Shape in_shape = a.shape();
  DType dt = a.dtype();
  return recorded("slice", a, a.as_strided(shape, strides, off), [=](const Tensor& g) {
    return scatter_into_zeros(g, in_shape, g.dtype() == dt ? dt : g.dtype(),
                              [&](const Tensor& z) { return slice(z, d, start, end, step); });
  });
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  const int64_t d = wrap_dim(dim, a.dim(), "narrow");
  if (start < 0 || length < 0 || start + length > a.shape()[d])
    HP_THROW(IndexError, "narrow", "range [", start, ", ", start + length, ") out of bounds for dim ",
             d, " of ", a.desc());
  return slice(a, d, start, start + length);
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  const int64_t d = wrap_dim(dim, a.dim(), "select");
  const int64_t n = a.shape()[d];
  if (index < -n || index >= n)
    HP_THROW(IndexError, "select", "index ", index, " out of range for dim ", d, " of ", a.desc());
  if (index < 0) index += n;
  Shape shape = a.shape(), strides = a.strides();
  const int64_t off = a.offset() + index * strides[d];
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Shape in_shape = a.shape();
  return recorded("select", a, a.as_strided(shape, strides, off), [=](const Tensor& g) {
    return scatter_into_zeros(g, in_shape, g.dtype(),
                              [&](const Tensor& z) { return select(z, d, index); });
  });
}

Tensor expand(const Tensor& a, const Shape& shape) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd < a.dim())
    HP_THROW(ValueError, "expand", "cannot expand ", a.desc(), " to fewer dims ", shape_str(shape));
  Shape out(nd), strides(nd, 0);
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t ai = i - (nd - a.dim());
    const int64_t want = shape[i];
    if (ai < 0) {
      if (want < 0) HP_THROW(ValueError, "expand", "-1 not allowed for a new leading dim");
      out[i] = want;
      continue;
    }
    const int64_t have = a.shape()[ai];
    if (want == -1 || want == have) {
      out[i] = have;
      strides[i] = a.strides()[ai];
    } else if (have == 1) {
      out[i] = want;
    } else {
      HP_THROW(ValueError, "expand", "cannot expand ", a.desc(), " to ", shape_str(shape));
    }
  }
  if (out == a.shape()) return a;
  Shape in_shape = a.shape();
  return recorded("expand", a, a.as_strided(out, strides, a.offset()),
                  [in_shape](const Tensor& g) { return sum_to(g, in_shape); });
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  const int64_t d = wrap_dim(dim, a.dim() + 1, "unsqueeze");
  Shape s = a.shape();
  s.insert(s.begin() + d, 1);
  return reshape(a, s);
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  const int64_t d = wrap_dim(dim, a.dim(), "squeeze");
  if (a.shape()[d] != 1) return a;
  Shape s = a.shape();
  s.erase(s.begin() + d);
  return reshape(a, s);
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  if (a.dim() == 0) return reshape(a, {1});
  const int64_t s = wrap_dim(start_dim, a.dim(), "flatten"), e = wrap_dim(end_dim, a.dim(), "flatten");
  if (s > e) HP_THROW(ValueError, "flatten", "start_dim ", s, " > end_dim ", e);
  Shape out(a.shape().begin(), a.shape().begin() + s);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= a.shape()[i];
  out.push_back(m);
  out.insert(out.end(), a.shape().begin() + e + 1, a.shape().end());
  return reshape(a, out);
}

}  // namespace hp
