// Deferred weight gradients: the split backward of zero-bubble schedules (schedule.h: I then W).
//
// The backward of a linear layer computes the input gradient dX = dY · W, which the previous stage
// waits for, and the weight gradient dW = dYᵀ · X, which nobody waits for. deferred_linear (a
// nn::LinearKernel) computes y = x · wᵀ + b like ops linear; in a backward run under a
// WeightGradCapture it computes dX only and queues the weight (and bias) gradient as a task, which
// the W action runs later (Megatron's WeightGradStore). Outside a capture it is an ordinary linear.
// A queued task adds its gradients into the parameters through the autograd engine, so gradient
// accumulation and post-accumulate hooks see them exactly as a plain backward's (FSDP holds a
// split backward's gradients until finish_grads: fsdp.h, FsdpOptions::reduce_at_finish). W reads
// no parameter, only X and dY, so FSDP may free the gathered weights at the end of I.
//
// Only linear GEMMs are deferred: norms, embeddings and attention give their weight gradients in I.
#pragma once

#include <functional>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::nn {
class Module;
}

namespace hp::pipeline {

using WeightGradTasks = std::vector<std::function<void()>>;

// While alive, deferred_linear backwards on this thread queue their weight gradients into `tasks`.
class WeightGradCapture {
 public:
  explicit WeightGradCapture(WeightGradTasks* tasks);
  ~WeightGradCapture();
  WeightGradCapture(const WeightGradCapture&) = delete;
  WeightGradCapture& operator=(const WeightGradCapture&) = delete;

 private:
  WeightGradTasks* prev_;
};

// x [..., in], w [out, in], b [out] or undefined → [..., out]; differentiable in x, w and b.
Tensor deferred_linear(const Tensor& x, const Tensor& w, const Tensor& b);

// Sets deferred_linear as the kernel of every nn::Linear under `root`. Throws ValueError naming a
// module that already has a kernel (MXFP8): its GEMMs cannot be split this way.
void install_deferred_linears(nn::Module& root);

}  // namespace hp::pipeline
