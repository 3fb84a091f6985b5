#include "hp/optim/grad.h"

#include <cmath>
#include <span>

#include "hp/core/thread_pool.h"
#include "hp/optim/kernels.h"

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

// Σ g² over every defined grad, in double (kernels.h sum_of_squares: fixed blocks per tensor,
// combined in parameter order).
double grad_sum_of_squares(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;  // keeps converted grads alive while the spans point into them
  std::vector<std::span<const float>> spans;
  for (const auto& p : params) {
    Tensor g = f32_grad(p);
    if (!g.defined()) continue;
    spans.emplace_back(g.data<float>(), static_cast<size_t>(g.numel()));
    grads.push_back(std::move(g));
  }
  return optim::sum_of_squares(spans);
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

// Scales by clip_factor unless it is 1.
void clip_to(const std::vector<Tensor>& params, double norm, double max_norm) {
  const double factor = clip_factor(norm, max_norm);
  if (factor != 1.0) scale_grads(params, factor);
}
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = std::sqrt(grad_sum_of_squares(params));
  clip_to(params, norm, max_norm);
  return norm;
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && std::isfinite(norm) && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double global_grad_norm(const std::vector<Tensor>& sharded, const std::vector<Tensor>& replicated,
                        dist::Communicator& comm) {
  const Tensor sums =  // [size]: every rank's shard sum, added in rank order below
      comm.all_gather(from_data<double>({grad_sum_of_squares(sharded)}, {1}));
  double total = 0;
  for (int r = 0; r < comm.size(); ++r) total += sums.data<double>()[r];
  return std::sqrt(total + grad_sum_of_squares(replicated));
}

double clip_grad_norm(const std::vector<Tensor>& sharded, const std::vector<Tensor>& replicated,
                      double max_norm, dist::Communicator& comm) {
  const double norm = global_grad_norm(sharded, replicated, comm);
  clip_to(sharded, norm, max_norm);
  clip_to(replicated, norm, max_norm);
  return norm;
}

}  // namespace hp::optim
