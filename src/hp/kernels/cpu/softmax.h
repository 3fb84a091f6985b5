// Row-wise softmax, log_softmax, logsumexp and fused cross-entropy over the last dim of contiguous
// tensors (f64, f32, bf16, f16; narrow dtypes compute in f32 and round once on store).
//
// One thread owns each row and the row kernels reduce in a fixed order, so every result is bitwise
// independent of the thread count. Ops for other dims move the dim last first (hp/ops/softmax.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::kernels {

// x [..., n] contiguous → y [..., n] of x's dtype.
Tensor softmax_lastdim(const Tensor& x, bool log);
// y [..., n] contiguous (the forward output), g [..., n] → dx of y's dtype.
Tensor softmax_lastdim_backward(const Tensor& y, const Tensor& g, bool log);
// x [..., n] contiguous → [...] of x's dtype.
Tensor logsumexp_lastdim(const Tensor& x);

// The compute dtype of a float dtype: f64 for f64, f32 otherwise.
DType softmax_compute_dtype(DType dt);

// logits [N, V] contiguous, targets[N] already checked against [0, V) or equal to ignore_index.
// Writes per-row loss [N] (0 for ignored rows) and logsumexp [N], both in the compute dtype.
void cross_entropy_forward(const Tensor& logits, const std::vector<int64_t>& targets,
                           int64_t ignore_index, Tensor* loss, Tensor* lse);
// dlogits [N, V] (logits' dtype) = (softmax - onehot(target)) * scale[row]; ignored rows are 0.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& lse,
                              const std::vector<int64_t>& targets, int64_t ignore_index,
                              const std::vector<double>& scale);

}  // namespace hp::kernels
