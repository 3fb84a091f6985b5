// Tensor: a cheap handle (one shared_ptr) to a descriptor of shape, strides (in elements), offset,
// dtype and shared storage, plus the autograd fields (requires_grad, grad, grad_fn).
//
// Core only knows raw, non-differentiable operations (metadata, strided views, copies, fills,
// factories). Differentiable ops, including differentiable views, live in hp/ops/ops.h as free
// functions; layers above use those.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "hp/core/allocator.h"
#include "hp/core/dtype.h"
#include "hp/core/error.h"

namespace hp {

using Shape = std::vector<int64_t>;

namespace autograd {
class Node;
}

class Tensor;

namespace detail {
struct TensorImpl {
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<Storage> storage;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves only, created lazily
  std::string name;  // optional, for error messages and parameters
};
}  // namespace detail

// Number of elements of a shape; throws on negative dims.
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `what`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what = "dim");

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  size_t itemsize() const { return dtype_size(impl_->dtype); }
  int64_t numel() const { return shape_numel(impl_->shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  bool is_contiguous() const;
  MemTier tier() const { return impl_->storage->tier(); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  detail::TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<detail::TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // Pointer to element 0 (storage + offset).
  void* raw_data() const;
  // Typed pointer; throws if T does not match dtype.
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  // Single element as double (any dtype, any layout); index has one entry per dim.
  double at(const std::vector<int64_t>& index) const;
  // The value of a one-element tensor.
  double item() const;

  // --- raw views (share storage, no autograd) ---
  Tensor as_strided(Shape shape, Shape strides, int64_t offset) const;

  // --- raw data operations (no autograd) ---
  // Copies src into this tensor elementwise (broadcasting src, converting dtype).
  void copy_from(const Tensor& src) const;
  void fill_(double value) const;
  // A contiguous tensor with the same values (this one if already contiguous).
  Tensor contiguous() const;
  // A new contiguous copy.
  Tensor clone() const;
  // Contiguous copy converted to dtype (a new tensor even if the dtype matches).
  Tensor to(DType dt) const;
  // Values as doubles in row-major order (tests, printing).
  std::vector<double> to_vector() const;
  template <class T>
  std::vector<T> to_vector_as() const {
    auto v = to_vector();
    return std::vector<T>(v.begin(), v.end());
  }

  // --- autograd fields ---
  bool requires_grad() const { return impl_->requires_grad; }
  // Leaves only; returns *this for chaining.
  const Tensor& requires_grad_(bool on = true) const;
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) const { impl_->grad = g.impl_; }
  void zero_grad() const { impl_->grad.reset(); }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  // Same data and metadata, cut from the graph (no grad_fn, requires_grad false).
  Tensor detach() const;
  // Runs backward from this tensor: `grad` may be omitted for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  const std::string& name() const { return impl_->name; }
  void set_name(std::string n) const { impl_->name = std::move(n); }

  std::string to_string(int64_t max_per_dim = 6) const;
  // "[2, 3] f32" — used in error messages.
  std::string desc() const;

 private:
  void check_dtype(DType want) const;
  std::shared_ptr<detail::TensorImpl> impl_;
};

// --- factories (device tier, the memory computation runs in, unless said otherwise; tagged with
// the thread's MemCategoryScope: core/allocator.h) ---
Tensor empty(const Shape& shape, DType dt = DType::f32, MemTier tier = MemTier::device);
Tensor zeros(const Shape& shape, DType dt = DType::f32, MemTier tier = MemTier::device);
Tensor ones(const Shape& shape, DType dt = DType::f32);
Tensor full(const Shape& shape, double value, DType dt = DType::f32);
// [start, end) with step, like torch.arange.
Tensor arange(double start, double end, double step = 1.0, DType dt = DType::i64);
Tensor arange(int64_t end, DType dt = DType::i64);
// From host values (converted to dt). shape must match values.size().
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dt = DType::f32);
template <class T>
Tensor from_data(const std::vector<T>& values, const Shape& shape) {
  Tensor t = empty(shape, dtype_of<T>());
  HP_CHECK(static_cast<int64_t>(values.size()) == t.numel());
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
// Wraps existing memory without copying; `keep_alive` owns it.
Tensor from_blob(void* data, const Shape& shape, DType dt, std::shared_ptr<void> keep_alive);

}  // namespace hp
