#include "hp/optim/grad.h"

#include <cmath>

#include "hp/core/thread_pool.h"

namespace hp::optim {

namespace {
Tensor f32_grad(const Tensor& p) {
  Tensor g = p.grad();
  if (g.defined() && (g.dtype() != DType::f32 || !g.is_contiguous())) {
    g = g.to(DType::f32);
    p.set_grad(g);
  }
  return g;
}

// Σ g² over every defined grad, in double: fixed blocks per tensor combined in parameter order.
double sum_of_squares(const std::vector<Tensor>& params) {
  constexpr int64_t kBlock = 1 << 14;
  double total = 0;
  for (const auto& p : params) {
    Tensor g = f32_grad(p);
    if (!g.defined()) continue;
    const float* x = g.data<float>();
    const int64_t n = g.numel();
    std::vector<double> partial(static_cast<size_t>(num_blocks(n, kBlock)), 0.0);
    parallel_blocks(n, kBlock, [&](int64_t b, int64_t lo, int64_t hi) {
      double acc = 0;
      for (int64_t i = lo; i < hi; ++i) acc += static_cast<double>(x[i]) * x[i];
      partial[static_cast<size_t>(b)] = acc;
    });
    for (double v : partial) total += v;
  }
  return total;
}

// Multiplies every defined .grad by `factor` in place.
void scale_grads(const std::vector<Tensor>& params, double factor) {
  const float f = static_cast<float>(factor);
  for (const auto& p : params) {
    Tensor g = f32_grad(p);
    if (!g.defined()) continue;
    float* x = g.data<float>();
    parallel_for(0, g.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) x[i] *= f;
    });
  }
}

// Scales when the norm is finite and above max_norm (> 0), as torch's clip_grad_norm_.
void clip_to(const std::vector<Tensor>& params, double norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm)
    scale_grads(params, max_norm / (norm + 1e-6));
}
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = std::sqrt(sum_of_squares(params));
  clip_to(params, norm, max_norm);
  return norm;
}

double clip_grad_norm(const std::vector<Tensor>& sharded, const std::vector<Tensor>& replicated,
                      double max_norm, dist::Communicator& comm,
                      const std::vector<Tensor>& uncounted) {
  const Tensor sums =  // [size]: every rank's shard sum, added in rank order below
      comm.all_gather(from_data<double>({sum_of_squares(sharded)}, {1}));
  double total = 0;
  for (int r = 0; r < comm.size(); ++r) total += sums.data<double>()[r];
  const double norm = std::sqrt(total + sum_of_squares(replicated));
  clip_to(sharded, norm, max_norm);
  clip_to(replicated, norm, max_norm);
  clip_to(uncounted, norm, max_norm);
  return norm;
}

}  // namespace hp::optim
