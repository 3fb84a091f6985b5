// cat, split and stack. cat copies each input into its slab of the output; split returns views
// (one node for all pieces, so the backward is a single cat); stack is cat of unsqueezed inputs.
#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// View of t's slab [start, start + len) along dim d (raw, no autograd).
Tensor slab(const Tensor& t, int64_t d, int64_t start, int64_t len) {
  Shape shape = t.shape();
  shape[d] = len;
  return t.as_strided(shape, t.strides(), t.offset() + start * t.strides()[d]);
}

// Checks the inputs of cat and returns the output shape.
Shape cat_shape(const std::vector<Tensor>& ts, int64_t d) {
  const Tensor& first = ts[0];
  Shape out = first.shape();
  out[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined()) HP_THROW(ValueError, "cat", "tensor ", i, " is undefined");
    if (t.dtype() != first.dtype() || t.dim() != first.dim())
      HP_THROW(ValueError, "cat", "tensor ", i, " ", t.desc(), " does not match tensor 0 ",
               first.desc());
    for (int64_t e = 0; e < t.dim(); ++e)
      if (e != d && t.shape()[e] != first.shape()[e])
        HP_THROW(ValueError, "cat", "tensor ", i, " ", t.desc(), " differs from tensor 0 ",
                 first.desc(), " outside dim ", d);
    out[d] += t.shape()[d];
  }
  return out;
}

// Raw cat (no autograd) of checked inputs.
Tensor cat_raw(const std::vector<Tensor>& ts, int64_t d, const Shape& shape) {
  Tensor out = empty(shape, ts[0].dtype());
  int64_t at = 0;
  for (const Tensor& t : ts) {
    if (t.numel() > 0) slab(out, d, at, t.shape()[d]).copy_from(t);
    at += t.shape()[d];
  }
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  HP_PROFILE_OP("cat");
  if (tensors.empty()) HP_THROW(ValueError, "cat", "needs at least one tensor");
  if (tensors[0].defined() && tensors[0].dim() == 0)
    HP_THROW(ValueError, "cat", "cannot concatenate 0-d tensors (use stack)");
  const int64_t d = wrap_dim(dim, tensors[0].defined() ? tensors[0].dim() : 0, "cat");
  Tensor y = cat_raw(tensors, d, cat_shape(tensors, d));
  if (autograd::needs_grad(tensors)) {
    std::vector<int64_t> sizes;
    std::vector<bool> needs;
    for (const Tensor& t : tensors)
      sizes.push_back(t.shape()[d]), needs.push_back(t.requires_grad());
    autograd::record("cat", tensors, {y}, [=](const std::vector<Tensor>& g) {
      std::vector<Tensor> out;
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        out.push_back(needs[i] ? slab(g[0], d, at, sizes[i]).clone() : Tensor());
        at += sizes[i];
      }
      return out;
    });
  }
  return y;
}

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  HP_PROFILE_OP("split");
  if (!a.defined() || a.dim() == 0)
    HP_THROW(ValueError, "split", "input must have at least one dim, got ",
             a.defined() ? a.desc() : "undefined");
  const int64_t d = wrap_dim(dim, a.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) HP_THROW(ValueError, "split", "negative size ", s, " in ", shape_str(sizes));
    total += s;
  }
  if (total != a.shape()[d])
    HP_THROW(ValueError, "split", "sizes ", shape_str(sizes), " sum to ", total, ", not to dim ", d,
             " of ", a.desc());
  std::vector<Tensor> outs;
  int64_t at = 0;
  for (int64_t s : sizes) {
    outs.push_back(slab(a, d, at, s));
    at += s;
  }
  const Shape in_shape = a.shape();
  // One node for every piece: pieces without a gradient arrive as zeros, so backward is one cat.
  autograd::record("split", {a}, outs, [d, in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{cat_raw(g, d, in_shape)};
  });
  return outs;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  HP_PROFILE_OP("stack");
  if (tensors.empty()) HP_THROW(ValueError, "stack", "needs at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].defined() || tensors[i].shape() != tensors[0].shape())
      HP_THROW(ValueError, "stack", "tensor ", i, " ",
               tensors[i].defined() ? tensors[i].desc() : "undefined", " does not match tensor 0 ",
               tensors[0].defined() ? tensors[0].desc() : "undefined");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

}  // namespace hp
