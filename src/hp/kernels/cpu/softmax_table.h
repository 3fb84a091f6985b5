// Row kernels for softmax-like ops, instantiated per ISA (softmax_impl.h), one kernel family of
// registry.h.
//
// Every function works on one contiguous row of n elements and is run by one thread, with a fixed
// accumulation order (4·W lane accumulators, then a fixed tree), so results depend only on the row
// — never on the thread count. NaN anywhere in a row makes the row's results NaN.
#pragma once

#include <cstdint>

#include "hp/kernels/registry.h"

namespace hp::kernels {

template <class T>
struct SoftmaxRowFns {
  // y = exp(x - max) / sum(exp(x - max))
  void (*softmax)(const T* x, T* y, int64_t n);
  // y = x - logsumexp(x)
  void (*log_softmax)(const T* x, T* y, int64_t n);
  // max + log(sum(exp(x - max))); ±Inf when the max is ±Inf (all -Inf rows give -Inf).
  T (*logsumexp)(const T* x, int64_t n);
  // dx = y * (g - sum(g * y))
  void (*softmax_bwd)(const T* y, const T* g, T* dx, int64_t n);
  // dx = g - exp(y) * sum(g)
  void (*log_softmax_bwd)(const T* y, const T* g, T* dx, int64_t n);
  // Cross-entropy backward of one row: dx = (exp(x - lse) - onehot(target)) * scale.
  void (*cross_entropy_bwd)(const T* x, T lse, int64_t target, T scale, T* dx, int64_t n);
};

HP_KERNEL_FAMILY(SoftmaxRowFns<float>);
// The f64 path (exact libm math), for gradient checks and f64 tensors.
const SoftmaxRowFns<double>& softmax_row_fns_f64();

}  // namespace hp::kernels
