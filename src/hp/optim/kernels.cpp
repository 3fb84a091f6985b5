#include "hp/optim/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"

namespace hp::optim {

AdamWStep adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                        int64_t t, double grad_scale) {
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
  s.decay = 1.0f - s.lr * s.weight_decay;
  s.one_minus_beta1 = 1.0f - s.beta1;
  s.one_minus_beta2 = 1.0f - s.beta2;
  s.inv_bias_correction2_sqrt = 1.0f / s.bias_correction2_sqrt;
  s.grad_scale = static_cast<float>(grad_scale);
  return s;
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  kernels::kernel_table<AdamWTable>().update(p, g, m, v, n, s);
}

namespace {
// Σ x² of blocks [b0, b1) of x [n] into out[0, b1 - b0), each block in double in index order.
// One block is a chain of dependent adds, bounded by the add's latency (4 cycles): kLanes blocks
// run side by side as independent chains, which the CPU overlaps, each still in its own order.
void block_sums(const float* x, int64_t n, int64_t b0, int64_t b1, double* out) {
  constexpr int kLanes = 8;
  constexpr int64_t kB = kSumSquaresBlock;
  for (int64_t g = b0; g < b1; g += kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, b1 - g));
    double acc[kLanes] = {};
    const float* row[kLanes];
    int64_t len[kLanes];
    for (int j = 0; j < lanes; ++j) {
      row[j] = x + (g + j) * kB;
      len[j] = std::min(kB, n - (g + j) * kB);
    }
    // Only a buffer's last block is short: the group runs to its shortest block side by side.
    const int64_t common = len[lanes - 1];
    if (lanes == kLanes) {  // a constant count: the 8 chains stay in registers
      for (int64_t i = 0; i < common; ++i)
        for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(row[j][i]) * row[j][i];
    } else {
      for (int64_t i = 0; i < common; ++i)
        for (int j = 0; j < lanes; ++j) acc[j] += static_cast<double>(row[j][i]) * row[j][i];
    }
    for (int j = 0; j < lanes; ++j) {
      for (int64_t i = common; i < len[j]; ++i)
        acc[j] += static_cast<double>(row[j][i]) * row[j][i];
      out[g - b0 + j] = acc[j];
    }
  }
}
}  // namespace

double sum_of_squares(const std::vector<std::span<const float>>& buffers) {
  // Tasks of up to kGroup blocks of one buffer; partial[first[k] + b] is buffer k's block b.
  constexpr int64_t kGroup = 8;
  struct Task {
    size_t k;
    int64_t b0, b1;
  };
  std::vector<Task> tasks;
  std::vector<int64_t> first(buffers.size() + 1, 0);
  for (size_t k = 0; k < buffers.size(); ++k) {
    const int64_t blocks = num_blocks(static_cast<int64_t>(buffers[k].size()), kSumSquaresBlock);
    for (int64_t b = 0; b < blocks; b += kGroup)
      tasks.push_back({k, b, std::min(blocks, b + kGroup)});
    first[k + 1] = first[k] + blocks;
  }
  std::vector<double> partial(static_cast<size_t>(first.back()), 0.0);
  parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const Task& task = tasks[static_cast<size_t>(t)];
      const std::span<const float> x = buffers[task.k];
      block_sums(x.data(), static_cast<int64_t>(x.size()), task.b0, task.b1,
                 partial.data() + first[task.k] + task.b0);
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

double frobenius_norm(const float* x, int64_t n) {
  return std::sqrt(sum_of_squares({std::span<const float>(x, static_cast<size_t>(n))}));
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
