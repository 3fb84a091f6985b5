#include "hp/kernels/cpu/index.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/typed.h"

namespace hp::kernels {

namespace {

using detail::Compute;
using detail::load_index;

void check_index_dtype(const Tensor& index, const char* op) {
  if (!index.defined() || (index.dtype() != DType::i64 && index.dtype() != DType::i32))
    HP_THROW(ValueError, op, "index must be i64 or i32, got ",
             index.defined() ? index.desc() : "undefined");
}

// index (contiguous) values all in [0, size); the first bad one is named with its position.
void check_index_values(const Tensor& index, int64_t size, int64_t dim, const Tensor& a,
                        const char* op) {
  const void* p = index.raw_data();
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t v = load_index(p, index.dtype(), i);
    if (v < 0 || v >= size)
      HP_THROW(IndexError, op, "index ", v, " (position ", i, ") is out of range [0, ", size,
               ") for dim ", dim, " of ", a.desc());
  }
}

// Calls fn(U{}) with an unsigned type of the element size: copies move raw bits, any dtype.
template <class Fn>
void dispatch_bytes(size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      fn(uint8_t{});
      return;
    case 2:
      fn(uint16_t{});
      return;
    case 4:
      fn(uint32_t{});
      return;
    case 8:
      fn(uint64_t{});
      return;
    default:
      HP_CHECK(false, "unsupported element size ", size);
  }
}

// Lines along `dim` of the shape `shape`: line l is the set of elements whose non-dim coordinates
// are the l-th row-major combination. offset(l, strides) gives an operand's element offset of it.
struct Lines {
  Shape outer;  // shape without dim
  int64_t count = 1, len = 1, dim = 0;
  Lines(const Shape& shape, int64_t d) : dim(d) {
    for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
      if (i != d) outer.push_back(shape[i]), count *= shape[i];
    len = shape.empty() ? 1 : shape[d];
  }
  int64_t offset(int64_t l, const Shape& strides) const {
    int64_t off = 0;
    for (int64_t i = static_cast<int64_t>(outer.size()) - 1; i >= 0; --i) {
      const int64_t s = strides[i < dim ? i : i + 1];
      off += (l % outer[i]) * s;
      l /= outer[i];
    }
    return off;
  }
};

void check_same_rank(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  if (a.dim() != b.dim())
    HP_THROW(ValueError, op, what, " ", b.desc(), " must have as many dims as ", a.desc());
}

int64_t stride_or_1(const Tensor& t, int64_t d) {
  return t.dim() == 0 ? 1 : t.strides()[d];
}

}  // namespace

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index, const char* op) {
  check_index_dtype(index, op);
  check_same_rank(a, index, op, "index");
  const int64_t d = a.dim() == 0 ? 0 : wrap_dim(dim, a.dim(), op);
  const int64_t size = a.dim() == 0 ? 1 : a.shape()[d];
  for (int64_t e = 0; e < a.dim(); ++e)
    if (e != d && index.shape()[e] > a.shape()[e])
      HP_THROW(ValueError, op, "index ", index.desc(), " is larger than input ", a.desc(),
               " outside dim ", d);
  const Tensor idx = index.contiguous();
  check_index_values(idx, size, d, a, op);
  Tensor out = empty(idx.shape(), a.dtype());
  const Lines lines(idx.shape(), d);
  if (out.numel() == 0) return out;
  const int64_t si = stride_or_1(idx, d), sa = stride_or_1(a, d);
  dispatch_bytes(a.itemsize(), [&](auto tag) {
    using U = decltype(tag);
    const U* ap = static_cast<const U*>(a.raw_data());
    U* op_ = static_cast<U*>(out.raw_data());
    const void* ip = idx.raw_data();
    parallel_for(
        0, lines.count, std::max<int64_t>(1, 16384 / lines.len), [&](int64_t l0, int64_t l1) {
          for (int64_t l = l0; l < l1; ++l) {
            const int64_t oi = lines.offset(l, idx.strides()), oa = lines.offset(l, a.strides());
            for (int64_t j = 0; j < lines.len; ++j)
              op_[oi + j * si] = ap[oa + load_index(ip, idx.dtype(), oi + j * si) * sa];
          }
        });
  });
  return out;
}

void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                  const char* op) {
  check_index_dtype(index, op);
  check_same_rank(out, index, op, "index");
  check_same_rank(out, src, op, "src");
  if (src.dtype() != out.dtype())
    HP_THROW(ValueError, op, "src ", src.desc(), " must have the dtype of ", out.desc());
  const int64_t d = out.dim() == 0 ? 0 : wrap_dim(dim, out.dim(), op);
  const int64_t size = out.dim() == 0 ? 1 : out.shape()[d];
  for (int64_t e = 0; e < out.dim(); ++e)
    if (index.shape()[e] > src.shape()[e] || (e != d && index.shape()[e] > out.shape()[e]))
      HP_THROW(ValueError, op, "index ", index.desc(), " must fit in src ", src.desc(),
               " and, outside dim ", d, ", in ", out.desc());
  const Tensor idx = index.contiguous();
  check_index_values(idx, size, d, out, op);
  HP_CHECK(out.is_contiguous());
  const Lines lines(idx.shape(), d);
  if (idx.numel() == 0) return;
  const int64_t si = stride_or_1(idx, d), ss = stride_or_1(src, d), so = stride_or_1(out, d);
  detail::dispatch_arith(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const T* sp = static_cast<const T*>(src.raw_data());
    T* outp = static_cast<T*>(out.raw_data());
    const void* ip = idx.raw_data();
    // One thread per line: all writes of a line stay in that line, in index order.
    parallel_for(
        0, lines.count, std::max<int64_t>(1, 16384 / lines.len), [&](int64_t l0, int64_t l1) {
          for (int64_t l = l0; l < l1; ++l) {
            const int64_t oi = lines.offset(l, idx.strides()), os = lines.offset(l, src.strides());
            const int64_t oo = lines.offset(l, out.strides());
            for (int64_t j = 0; j < lines.len; ++j) {
              T& dst = outp[oo + load_index(ip, idx.dtype(), oi + j * si) * so];
              dst = C::store(C::load(dst) + C::load(sp[os + j * ss]));
            }
          }
        });
  });
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                   const char* op) {
  Tensor out = a.clone();
  scatter_add_(out, dim, index, src, op);
  return out;
}

namespace {

// (outer, n, inner) of a contiguous shape split at dim d.
void split_at(const Shape& shape, int64_t d, int64_t* outer, int64_t* n, int64_t* inner) {
  *outer = 1, *inner = 1;
  for (int64_t i = 0; i < d; ++i) *outer *= shape[i];
  *n = shape[d];
  for (int64_t i = d + 1; i < static_cast<int64_t>(shape.size()); ++i) *inner *= shape[i];
}

Tensor checked_1d_index(const Tensor& index, const char* op) {
  check_index_dtype(index, op);
  if (index.dim() > 1) HP_THROW(ValueError, op, "index must be 1-D, got ", index.desc());
  return index.contiguous();
}

}  // namespace

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index, const char* op) {
  if (a.dim() == 0) HP_THROW(ValueError, op, "input must have at least one dim, got ", a.desc());
  const int64_t d = wrap_dim(dim, a.dim(), op);
  const Tensor idx = checked_1d_index(index, op);
  check_index_values(idx, a.shape()[d], d, a, op);
  const Tensor ac = a.contiguous();
  int64_t outer, n, inner;
  split_at(ac.shape(), d, &outer, &n, &inner);
  const int64_t k = idx.numel();
  Shape out_shape = a.shape();
  out_shape[d] = k;
  Tensor out = empty(out_shape, a.dtype());
  const size_t row_bytes = static_cast<size_t>(inner) * a.itemsize();
  if (out.numel() == 0) return out;
  const char* ap = static_cast<const char*>(ac.raw_data());
  char* outp = static_cast<char*>(out.raw_data());
  const void* ip = idx.raw_data();
  parallel_for(0, outer * k, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / k, i = r % k;
      const int64_t src_row = o * n + load_index(ip, idx.dtype(), i);
      std::memcpy(outp + r * row_bytes, ap + src_row * row_bytes, row_bytes);
    }
  });
  return out;
}

void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                const char* op) {
  if (out.dim() == 0)
    HP_THROW(ValueError, op, "input must have at least one dim, got ", out.desc());
  const int64_t d = wrap_dim(dim, out.dim(), op);
  const Tensor idx = checked_1d_index(index, op);
  if (src.dtype() != out.dtype())
    HP_THROW(ValueError, op, "src ", src.desc(), " must have the dtype of ", out.desc());
  Shape want = out.shape();
  want[d] = idx.numel();
  if (src.shape() != want)
    HP_THROW(ValueError, op, "src ", src.desc(), " must have shape ", shape_str(want),
             " for input ", out.desc(), " and ", idx.numel(), " indices along dim ", d);
  check_index_values(idx, out.shape()[d], d, out, op);
  HP_CHECK(out.is_contiguous());
  int64_t outer, n, inner;
  split_at(out.shape(), d, &outer, &n, &inner);
  const int64_t k = idx.numel();
  if (k == 0 || inner == 0 || outer == 0) return;
  // Stable counting sort of positions by destination: bucket b holds order[start[b], start[b+1]).
  std::vector<int64_t> start(static_cast<size_t>(n) + 1, 0), order(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    ++start[static_cast<size_t>(load_index(idx.raw_data(), idx.dtype(), i)) + 1];
  for (int64_t b = 0; b < n; ++b) start[b + 1] += start[b];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < k; ++i) order[fill[load_index(idx.raw_data(), idx.dtype(), i)]++] = i;
  }
  const Tensor sc = src.contiguous();
  detail::dispatch_arith(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    using CT = typename C::type;
    const T* sp = static_cast<const T*>(sc.raw_data());
    T* outp = static_cast<T*>(out.raw_data());
    // One thread per (outer, destination): sums its sources in position order, rounds once.
    parallel_for(0, outer * n, std::max<int64_t>(1, 4096 / inner), [&](int64_t r0, int64_t r1) {
      std::vector<CT> acc(static_cast<size_t>(inner));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r / n, b = r % n;
        if (start[b] == start[b + 1]) continue;
        T* dst = outp + r * inner;
        for (int64_t j = 0; j < inner; ++j) acc[j] = C::load(dst[j]);
        for (int64_t q = start[b]; q < start[b + 1]; ++q) {
          const T* s = sp + (o * k + order[q]) * inner;
          for (int64_t j = 0; j < inner; ++j) acc[j] += C::load(s[j]);
        }
        for (int64_t j = 0; j < inner; ++j) dst[j] = C::store(acc[j]);
      }
    });
  });
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                 const char* op) {
  Tensor out = a.clone();
  index_add_(out, dim, index, src, op);
  return out;
}

}  // namespace hp::kernels
