#include "hp/core/tensor_data.h"

namespace hp {

void set_data(const Tensor& t, const Tensor& src) {
  HP_CHECK(t.defined() && src.defined());
  detail::TensorImpl& d = *t.impl();
  const detail::TensorImpl& s = *src.impl();
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.dtype = s.dtype;
  d.storage = s.storage;
}

Tensor meta_tensor(const Shape& shape, DType dt) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  impl->storage = std::make_shared<Storage>(nullptr, 0, nullptr);
  return Tensor(std::move(impl));
}

bool has_data(const Tensor& t) {
  return t.numel() == 0 || t.storage()->nbytes() > 0;
}

}  // namespace hp
