#include "hp/kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"

namespace hp::kernels {

std::vector<int64_t> reduce_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    HP_THROW(ValueError, op, "repeated dim in ", shape_str(dims));
  // A 0-d tensor: "dim 0" means the (only) element.
  if (ndim == 0) out.clear();
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool red = std::binary_search(dims.begin(), dims.end(), d);
    if (!red) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

namespace {

template <class T>
T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::sum: return a + b;
    case ReduceOp::max: return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
    case ReduceOp::min: return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
  }
  return a;
}

template <class T>
T identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return T(0);
    case ReduceOp::max: return -std::numeric_limits<T>::infinity();
    case ReduceOp::min: return std::numeric_limits<T>::infinity();
  }
  return T(0);
}

// [O, R] contiguous f32 rows → out[O] (f32).
void inner_f32(ReduceOp op, const float* x, int64_t O, int64_t R, float* out) {
  const EwTable& tab = kernel_table<EwTable>();
  parallel_for(0, O, std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const float* row = x + o * R;
      switch (op) {
        case ReduceOp::sum: out[o] = tab.sum_f32(row, R); break;
        case ReduceOp::max: out[o] = tab.max_f32(row, R); break;
        case ReduceOp::min: {
          float r = identity<float>(op);
          for (int64_t i = 0; i < R; ++i) r = combine(op, r, row[i]);
          out[o] = r;
        }
      }
    }
  });
}

// [R, O] contiguous → out[O]: accumulates rows in order, vectorizable across O.
template <class T>
void outer(ReduceOp op, const T* x, int64_t R, int64_t O, T* out) {
  parallel_for(0, O, 256, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) out[o] = identity<T>(op);
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + r * O;
      if (op == ReduceOp::sum)
        for (int64_t o = b; o < e; ++o) out[o] += row[o];
      else
        for (int64_t o = b; o < e; ++o) out[o] = combine(op, out[o], row[o]);
    }
  });
}

// [A, R, C] contiguous → out[A, C]: outer() per slab, slabs spread over the pool (the nested
// outer() then runs inline). Each output still sums its R inputs in order r = 0..R-1.
template <class T>
void outer_slabs(ReduceOp op, const T* x, int64_t A, int64_t R, int64_t C, T* out) {
  if (A == 1) return outer(op, x, R, C, out);
  parallel_for(0, A, std::max<int64_t>(1, 65536 / std::max<int64_t>(R * C, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t i = b; i < e; ++i) outer(op, x + i * R * C, R, C, out + i * C);
               });
}

template <class T>
void inner_generic(ReduceOp op, const T* x, int64_t O, int64_t R, T* out) {
  parallel_for(0, O, std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      T r = identity<T>(op);
      for (int64_t i = 0; i < R; ++i) r = combine(op, r, x[o * R + i]);
      out[o] = r;
    }
  });
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim,
              DType out_dtype) {
  const std::vector<int64_t> dims = reduce_dims(dims_in, a.dim(), "reduce");
  const Shape out_shape = reduced_shape(a.shape(), dims, keepdim);
  int64_t R = 1;
  for (int64_t d : dims) R *= a.shape()[d];
  const int64_t O = shape_numel(out_shape);
  if (R == 0 && op != ReduceOp::sum)
    HP_THROW(ValueError, "reduce", "max/min over an empty dim of ", a.desc());
  // Compute type: f64 for f64 (and integers), else f32.
  const DType ct = (a.dtype() == DType::f64 || !is_floating(a.dtype())) ? DType::f64 : DType::f32;
  // Order kept dims first, reduced dims last; decide between row ("inner") and column ("outer").
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) kept.push_back(d);
  // Reduced dims that form one run [d0, d1] not reaching the last dim of a contiguous tensor: a is
  // [A, R, C] (A, C the kept dims before and after the run) and each slab's R rows of C
  // elements accumulate in order (outer), with no transposing copy. The broadcast backward's
  // sum_to is mostly of this kind (streams [B, T, n, D] summed over n, heads summed over H).
  const bool run = !dims.empty() && dims.back() - dims.front() + 1 == int64_t(dims.size()) &&
                   dims.back() < a.dim() - 1;
  int64_t A = 1;
  for (int64_t d = 0; run && d < dims.front(); ++d) A *= a.shape()[d];
  Tensor src;
  bool use_outer = false;
  if (run && !kept.empty() && a.is_contiguous()) {
    src = a.dtype() == ct ? a : a.to(ct);
    use_outer = true;
  } else {
    std::vector<int64_t> order = kept;
    order.insert(order.end(), dims.begin(), dims.end());
    Shape ps, pst;
    for (int64_t d : order) ps.push_back(a.shape()[d]), pst.push_back(a.strides()[d]);
    Tensor p = a.as_strided(ps, pst, a.offset());
    src = (p.is_contiguous() && p.dtype() == ct) ? p : p.to(ct);
  }
  Tensor out = empty(out_shape, ct);
  if (O > 0) {
    if (ct == DType::f32) {
      if (use_outer) outer_slabs<float>(op, src.data<float>(), A, R, O / A, out.data<float>());
      else inner_f32(op, src.data<float>(), O, R, out.data<float>());
    } else {
      if (use_outer) outer_slabs<double>(op, src.data<double>(), A, R, O / A, out.data<double>());
      else inner_generic<double>(op, src.data<double>(), O, R, out.data<double>());
    }
  }
  return out_dtype == ct ? out : out.to(out_dtype);
}

}  // namespace hp::kernels
