// Re-pointing a tensor handle's data in place, and tensors without data.
//
// A Tensor is a handle to a shared descriptor (core/tensor.h), and modules keep their parameters
// as such handles (Linear::weight). FSDP shows gathered data to a module by changing what the
// existing descriptor points at — every holder of the handle sees the change, so model code needs
// no hooks — and frees it again by pointing the descriptor at no data. Autograd fields
// (requires_grad, grad, grad_fn, grad accumulator, name) are never touched. Views taken before a
// change keep the data they had: they hold their own reference to the old storage.
#pragma once

#include "hp/core/tensor.h"

namespace hp {

// t's descriptor takes src's storage, shape, strides, offset and dtype.
void set_data(const Tensor& t, const Tensor& src);
// A tensor with shape and dtype but no data (empty storage, raw_data() null): a stand-in for
// data that lives elsewhere for now. Reading its elements is a bug.
Tensor meta_tensor(const Shape& shape, DType dt);
// False for a tensor with elements and no data behind them (a meta_tensor, or a handle given one
// by set_data).
bool has_data(const Tensor& t);

}  // namespace hp
