// Gradient check against central finite differences in f64.
//
// The function's output is contracted with a fixed random weight (so non-scalar outputs are checked
// in every direction at once); each input element is perturbed by ±eps and the numeric derivative
// compared with the analytic gradient from backward.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/ops/ops.h"

namespace hp::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Writes v into element `flat` (row-major over the view's shape) of a possibly strided tensor.
inline void set_flat(const Tensor& t, int64_t flat, double v) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.shape()[d]) * t.strides()[d];
    flat /= t.shape()[d];
  }
  store_from_double(static_cast<char*>(t.raw_data()) + off * static_cast<int64_t>(t.itemsize()),
                    t.dtype(), v);
}

// Random f64 leaf of `shape`; with transposed=true, a non-contiguous view (last two dims swapped).
inline Tensor leaf(const Shape& shape, uint64_t seed, bool transposed = false, double lo = -2.0,
                   double hi = 2.0) {
  manual_seed(seed);
  if (!transposed || shape.size() < 2) {
    Tensor t = rand(shape, DType::f64, lo, hi);
    t.requires_grad_();
    return t;
  }
  Shape s = shape;
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  Tensor base = rand(s, DType::f64, lo, hi);
  Shape st = base.strides();
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  Tensor t = base.as_strided(shape, st, 0);
  t.requires_grad_();
  return t;
}

inline void expect_gradcheck(const Fn& f, const std::vector<Tensor>& inputs, double eps = 1e-6,
                             double atol = 1e-6, double rtol = 1e-5) {
  Tensor out = f(inputs);
  manual_seed(12345);
  Tensor w = rand(out.shape(), DType::f64, -1.0, 1.0);
  Tensor loss = sum(mul(out, w));
  for (auto& t : inputs) t.zero_grad();
  loss.backward();
  autograd::NoGradGuard no_grad;
  auto eval = [&] { return sum(mul(f(inputs), w)).item(); };
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor g = x.grad();
    ASSERT_TRUE(g.defined()) << "input " << k << " got no gradient";
    ASSERT_EQ(g.shape(), x.shape());
    std::vector<double> gv = g.to_vector();
    std::vector<double> xv = x.to_vector();
    for (int64_t i = 0; i < x.numel(); ++i) {
      set_flat(x, i, xv[i] + eps);
      double up = eval();
      set_flat(x, i, xv[i] - eps);
      double down = eval();
      set_flat(x, i, xv[i]);
      double num = (up - down) / (2 * eps);
      ASSERT_NEAR(gv[i], num, atol + rtol * std::fabs(num)) << "input " << k << " element " << i;
    }
  }
}

}  // namespace hp::testing
