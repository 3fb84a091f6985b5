#include "hp/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "hp/core/mem_tier_scope.h"
#include "hp/core/strided_loop.h"

namespace hp {

int64_t shape_numel(const Shape& shape) {
  for (int64_t s : shape) {
    if (s < 0) HP_THROW(ValueError, "shape", "negative dimension in ", shape_str(shape));
    if (s == 0) return 0;  // [huge, 0] holds nothing, whatever the other dims
  }
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n))
      HP_THROW(ValueError, "shape", "element count of ", shape_str(shape), " overflows int64");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n)
    HP_THROW(IndexError, what, "dim ", dim, " out of range for a tensor with ", ndim, " dims");
  return dim < 0 ? dim + n : dim;
}

int64_t Tensor::size(int64_t d) const {
  return impl_->shape[wrap_dim(d, dim())];
}
int64_t Tensor::stride(int64_t d) const {
  return impl_->strides[wrap_dim(d, dim())];
}

bool Tensor::is_contiguous() const {
  // No elements: every layout is contiguous (as torch); an empty tensor's strides are arbitrary.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (impl_->shape[d] == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= impl_->shape[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl_->storage->data()) +
         impl_->offset * static_cast<int64_t>(itemsize());
}

void Tensor::check_dtype(DType want) const {
  if (want != dtype())
    HP_THROW(ValueError, "tensor", "data<", dtype_name(want), ">() on a tensor of dtype ",
             dtype_name(dtype()));
}

double Tensor::at(const std::vector<int64_t>& index) const {
  if (static_cast<int64_t>(index.size()) != dim())
    HP_THROW(IndexError, "tensor", "index with ", index.size(), " entries for shape ",
             shape_str(shape()));
  int64_t off = 0;
  for (int64_t d = 0; d < dim(); ++d) {
    if (index[d] < 0 || index[d] >= impl_->shape[d])
      HP_THROW(IndexError, "tensor", "index ", index[d], " out of range for dim ", d, " of ",
               shape_str(shape()));
    off += index[d] * impl_->strides[d];
  }
  return load_as_double(static_cast<char*>(raw_data()) + off * static_cast<int64_t>(itemsize()),
                        dtype());
}

double Tensor::item() const {
  if (numel() != 1)
    HP_THROW(ValueError, "tensor", "item() needs one element, shape is ", shape_str(shape()));
  return load_as_double(raw_data(), dtype());
}

Tensor Tensor::as_strided(Shape shape, Shape strides, int64_t offset) const {
  HP_CHECK(shape.size() == strides.size());
  // Bounds: the furthest element reachable must lie inside the storage.
  int64_t lo = offset, hi = offset;
  bool empty_view = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) empty_view = true;
    int64_t span = (shape[d] - 1) * strides[d];
    (span < 0 ? lo : hi) += span;
  }
  const int64_t cap = static_cast<int64_t>(impl_->storage->nbytes() / itemsize());
  if (!empty_view && (lo < 0 || hi >= cap))
    HP_THROW(IndexError, "tensor", "view ", shape_str(shape), " strides ", shape_str(strides),
             " offset ", offset, " exceeds storage of ", cap, " elements");
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = impl_->dtype;
  impl->storage = impl_->storage;
  return Tensor(std::move(impl));
}

namespace {

template <class T>
inline double ld(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::is_same_v<T, bf16>)
    return bf16_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, f16>)
    return f16_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, f8e4m3>)
    return fp8_to_f32(v.bits, Fp8Kind::e4m3);
  else if constexpr (std::is_same_v<T, f8e5m2>)
    return fp8_to_f32(v.bits, Fp8Kind::e5m2);
  else if constexpr (std::is_same_v<T, e8m0>)
    return e8m0_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, bool>)
    return v ? 1.0 : 0.0;
  else
    return static_cast<double>(v);
}

template <class T>
inline void st(char* p, double x) {
  T v;
  if constexpr (std::is_same_v<T, bf16>)
    v.bits = f32_to_bf16(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, f16>)
    v.bits = f32_to_f16(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, f8e4m3>)
    v.bits = f32_to_fp8(static_cast<float>(x), Fp8Kind::e4m3);
  else if constexpr (std::is_same_v<T, f8e5m2>)
    v.bits = f32_to_fp8(static_cast<float>(x), Fp8Kind::e5m2);
  else if constexpr (std::is_same_v<T, e8m0>)
    v.bits = f32_to_e8m0(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, bool>)
    v = x != 0.0;
  else
    v = static_cast<T>(x);
  std::memcpy(p, &v, sizeof(T));
}

template <class F>
void dispatch_all(DType dt, F&& f) {
  switch (dt) {
    case DType::f64:
      return f(double{});
    case DType::f32:
      return f(float{});
    case DType::bf16:
      return f(bf16{});
    case DType::f16:
      return f(f16{});
    case DType::f8e4m3:
      return f(f8e4m3{});
    case DType::f8e5m2:
      return f(f8e5m2{});
    case DType::e8m0:
      return f(e8m0{});
    case DType::i32:
      return f(int32_t{});
    case DType::i64:
      return f(int64_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::boolean:
      return f(bool{});
  }
}

using ConvertFn = void (*)(char*, int64_t, const char*, int64_t, int64_t);

template <class S, class D>
void convert_row(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
  if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16>) {
    for (int64_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, s + i * ss, 4);
      uint16_t b = f32_to_bf16(f);
      std::memcpy(d + i * ds, &b, 2);
    }
  } else if constexpr (std::is_same_v<S, bf16> && std::is_same_v<D, float>) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, s + i * ss, 2);
      float f = bf16_to_f32(b);
      std::memcpy(d + i * ds, &f, 4);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) st<D>(d + i * ds, ld<S>(s + i * ss));
  }
}

ConvertFn convert_fn(DType src, DType dst) {
  ConvertFn fn = nullptr;
  dispatch_all(src, [&](auto s) {
    dispatch_all(dst, [&](auto d) { fn = &convert_row<decltype(s), decltype(d)>; });
  });
  return fn;
}

// Strides of `src` broadcast to `shape` (0 on expanded dims); throws if not broadcastable.
Shape broadcast_strides_to(const Tensor& src, const Shape& shape) {
  const int64_t nd = static_cast<int64_t>(shape.size()), sd = src.dim();
  if (sd > nd)
    HP_THROW(ValueError, "copy", "cannot broadcast ", shape_str(src.shape()), " to ",
             shape_str(shape));
  Shape out(nd, 0);
  for (int64_t i = 0; i < sd; ++i) {
    int64_t d = nd - sd + i;
    if (src.shape()[i] == shape[d])
      out[d] = src.strides()[i];
    else if (src.shape()[i] == 1)
      out[d] = 0;
    else
      HP_THROW(ValueError, "copy", "cannot broadcast ", shape_str(src.shape()), " to ",
               shape_str(shape));
  }
  return out;
}

Shape to_bytes(const Shape& strides, size_t item) {
  Shape b(strides.size());
  for (size_t i = 0; i < strides.size(); ++i) b[i] = strides[i] * static_cast<int64_t>(item);
  return b;
}

}  // namespace

void Tensor::copy_from(const Tensor& src) const {
  Shape sst = broadcast_strides_to(src, shape());
  const size_t di = itemsize(), si = src.itemsize();
  ConvertFn fn = convert_fn(src.dtype(), dtype());
  const bool same = src.dtype() == dtype();
  strided_loop<2>(
      shape(), {static_cast<char*>(raw_data()), static_cast<char*>(src.raw_data())},
      {to_bytes(strides(), di), to_bytes(sst, si)},
      [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
        if (same && s[0] == static_cast<int64_t>(di) && s[1] == static_cast<int64_t>(si))
          std::memcpy(p[0], p[1], static_cast<size_t>(n) * di);
        else
          fn(p[0], s[0], p[1], s[1], n);
      });
}

void Tensor::fill_(double value) const {
  Tensor one = empty({}, dtype());
  store_from_double(one.raw_data(), dtype(), value);
  copy_from(one);
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  return to(dtype());
}

Tensor Tensor::to(DType dt) const {
  Tensor out = empty(shape(), dt);
  out.copy_from(*this);
  return out;
}

std::vector<double> Tensor::to_vector() const {
  Tensor c = to(DType::f64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

const Tensor& Tensor::requires_grad_(bool on) const {
  if (!is_leaf())
    HP_THROW(ValueError, "autograd", "requires_grad_() on a non-leaf tensor ", desc());
  if (on && !is_floating(dtype()))
    HP_THROW(ValueError, "autograd", "only floating tensors can require grad, got ", desc());
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::detach() const {
  Tensor t = as_strided(shape(), strides(), offset());
  t.impl()->name = impl_->name;
  return t;
}

std::string Tensor::desc() const {
  if (!defined()) return "(undefined)";
  return shape_str(shape()) + " " + std::string(dtype_name(dtype()));
}

std::string Tensor::to_string(int64_t max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << desc() << (requires_grad() ? ", requires_grad" : "") << ")\n";
  std::vector<int64_t> idx(dim(), 0);
  // Recursive printer with elision in the middle of long dims.
  auto rec = [&](auto&& self, int64_t d) -> void {
    if (d == dim()) {
      double v = at(idx);
      if (is_floating(dtype()))
        os << std::setprecision(6) << std::showpoint << v << std::noshowpoint;
      else
        os << static_cast<int64_t>(v);
      return;
    }
    os << "[";
    const int64_t n = shape()[d];
    for (int64_t i = 0; i < n; ++i) {
      if (n > max_per_dim && i == max_per_dim / 2) {
        os << "..., ";
        i = n - max_per_dim / 2;
      }
      idx[d] = i;
      self(self, d + 1);
      if (i + 1 < n) os << ", ";
    }
    os << "]";
  };
  rec(rec, 0);
  return os.str();
}

// Bytes of a contiguous `shape` of `dt`; throws ValueError naming the shape when the element
// count or the byte size overflows int64 (a bad size from a config, never a real allocation).
static size_t checked_nbytes(const Shape& shape, DType dt) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dt)), &bytes))
    HP_THROW(ValueError, "shape", "byte size of ", shape_str(shape), " ", dtype_name(dt),
             " overflows int64");
  return static_cast<size_t>(bytes);
}

Tensor empty(const Shape& shape, DType dt, MemTier tier) {
  const size_t nbytes = checked_nbytes(shape, dt);
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  // A MemTierScope may send device-tier requests elsewhere (core/mem_tier_scope.h).
  impl->storage = std::make_shared<Storage>(
      nbytes, tier == MemTier::device ? device_tier_target() : tier);
  return Tensor(std::move(impl));
}

Tensor zeros(const Shape& shape, DType dt, MemTier tier) {
  Tensor t = empty(shape, dt, tier);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor ones(const Shape& shape, DType dt) {
  return full(shape, 1.0, dt);
}

Tensor full(const Shape& shape, double value, DType dt) {
  Tensor t = empty(shape, dt);
  t.fill_(value);
  return t;
}

Tensor arange(double start, double end, double step, DType dt) {
  if (step == 0.0) HP_THROW(ValueError, "arange", "step must be nonzero");
  const double span = (end - start) / step;
  if (!(span < 0x1p63))  // also NaN: the count must fit int64 before it is converted
    HP_THROW(ValueError, "arange", "arange(", start, ", ", end, ", ", step, ") has ", span,
             " elements, more than int64 holds");
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = empty({n}, dt);
  char* p = static_cast<char*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i)
    store_from_double(p + i * static_cast<int64_t>(t.itemsize()), dt,
                      start + step * static_cast<double>(i));
  return t;
}

Tensor arange(int64_t end, DType dt) {
  return arange(0.0, static_cast<double>(end), 1.0, dt);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dt) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    HP_THROW(ValueError, "tensor", values.size(), " values for shape ", shape_str(shape));
  Tensor src = from_blob(const_cast<double*>(values.data()), shape, DType::f64, nullptr);
  return src.to(dt);
}

Tensor from_blob(void* data, const Shape& shape, DType dt, std::shared_ptr<void> keep_alive) {
  const size_t nbytes = checked_nbytes(shape, dt);
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  impl->storage = std::make_shared<Storage>(data, nbytes, std::move(keep_alive));
  return Tensor(std::move(impl));
}

}  // namespace hp
