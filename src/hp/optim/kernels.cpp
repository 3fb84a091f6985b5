#include "hp/optim/kernels.h"

#include <cmath>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"

namespace hp::optim {

AdamWStep adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                        int64_t t) {
  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.eps = static_cast<float>(eps);
  s.weight_decay = static_cast<float>(weight_decay);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  s.step_size = static_cast<float>(lr / bc1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
  return s;
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float one_m_b1 = 1.0f - s.beta1, one_m_b2 = 1.0f - s.beta2;
  const float inv_bc2 = 1.0f / s.bias_correction2_sqrt;
  // Plain loop: GCC vectorizes it (-O2 -ftree-vectorize in Release); sqrt and div are IEEE exact
  // in both paths, so scalar and vector lanes agree.
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] + one_m_b1 * (gi - m[i]);
    const float vi = s.beta2 * v[i] + one_m_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_bc2 + s.eps;
    p[i] = p[i] * decay - s.step_size * (mi / denom);
  }
}

double frobenius_norm(const float* x, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  std::vector<double> partial(static_cast<size_t>(num_blocks(n, kBlock)), 0.0);
  parallel_blocks(n, kBlock, [&](int64_t b, int64_t lo, int64_t hi) {
    double acc = 0;
    for (int64_t i = lo; i < hi; ++i) acc += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(b)] = acc;
  });
  double total = 0;
  for (double p : partial) total += p;
  return std::sqrt(total);
}

void newton_schulz(const float* g, float* out, int64_t rows, int64_t cols, int steps) {
  const bool tall = rows > cols;
  // X is [r, c] with r <= c, so the Gram matrix A = X·Xᵀ is the smaller [r, r].
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols, n = rows * cols;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  std::vector<float> a(static_cast<size_t>(r * r)), b(static_cast<size_t>(r * r));
  const float inv = static_cast<float>(1.0 / (frobenius_norm(g, n) + 1e-7));
  if (tall) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        x[static_cast<size_t>(j * rows + i)] = g[i * cols + j] * inv;
  } else {
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = g[i] * inv;
  }
  for (int it = 0; it < steps; ++it) {
    // A = X·Xᵀ  [r, r]
    kernels::gemm_f32(false, true, r, r, c, 1.0f, x.data(), c, x.data(), c, 0.0f, a.data(), r);
    // B = b·A + c·(A·A)  [r, r]
    kernels::gemm_f32(false, false, r, r, r, kNsC, a.data(), r, a.data(), r, 0.0f, b.data(), r);
    for (int64_t i = 0; i < r * r; ++i)
      b[static_cast<size_t>(i)] += kNsB * a[static_cast<size_t>(i)];
    // X ← a·X + B·X  [r, c]
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = kNsA * x[static_cast<size_t>(i)];
    kernels::gemm_f32(false, false, r, c, r, 1.0f, b.data(), r, x.data(), c, 1.0f, y.data(), c);
    x.swap(y);
  }
  if (tall) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[static_cast<size_t>(j * rows + i)];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[static_cast<size_t>(i)];
  }
}

}  // namespace hp::optim
