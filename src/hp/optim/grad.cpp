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
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
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
  const double norm = std::sqrt(total);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm)
    scale_grads(params, max_norm / (norm + 1e-6));
  return norm;
}

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

void GradAccumulator::backward(const Tensor& loss_sum, int64_t valid_tokens) {
  if (valid_tokens < 0) HP_THROW(ValueError, "optim", "grad accumulation: negative token count");
  loss_sum_ += loss_sum.item();
  tokens_ += valid_tokens;
  ++micro_batches_;
  loss_sum.backward();
}

double GradAccumulator::finish() {
  if (tokens_ == 0)
    HP_THROW(ValueError, "optim", "grad accumulation: no valid tokens in ", micro_batches_,
             " micro-batches");
  scale_grads(params_, 1.0 / static_cast<double>(tokens_));
  const double mean = loss_sum_ / static_cast<double>(tokens_);
  loss_sum_ = 0;
  tokens_ = micro_batches_ = 0;
  return mean;
}

}  // namespace hp::optim
