// Deferred weight gradients (weight_grad.h).
#include "hp/pipeline/weight_grad.h"

#include "hp/autograd/engine.h"
#include "hp/autograd/function.h"
#include "hp/core/error.h"
#include "hp/nn/module.h"
#include "hp/ops/ops.h"

namespace hp::pipeline {

namespace {

thread_local WeightGradTasks* t_tasks = nullptr;

// dW = dYᵀ · X [out, in] and db = Σ rows of dY [out], as ops linear's backward forms them,
// from x2 [N, in] and dy2 [N, out].
std::pair<Tensor, Tensor> weight_grads(const Tensor& x2, const Tensor& dy2, bool bias) {
  Tensor dw = linear_weight_grad(x2, dy2);
  Tensor db = bias ? sum_to(dy2, {dy2.size(1)}) : Tensor();
  return {dw, db};
}

struct DeferredLinear {
  static constexpr const char* kName = "DeferredLinear";
  static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0], in[1]});
    // The weight and bias themselves (not detached aliases): W adds their gradients through them.
    ctx.state = std::vector<Tensor>{in[1], in[2]};
    return {linear(in[0], in[1], in[2])};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& g) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor& x = saved[0];
    const Tensor& w = saved[1];
    const int64_t in = w.size(1), out = w.size(0);
    const Tensor dy2 = reshape(g[0], {-1, out});  // [N, out]
    Tensor dx;
    if (ctx.needs_input_grad[0]) dx = reshape(matmul(dy2, w), x.shape());
    const bool need_w = ctx.needs_input_grad[1], need_b = ctx.needs_input_grad[2];
    if (!need_w && !need_b) return {dx, Tensor(), Tensor()};
    const Tensor x2 = reshape(x, {-1, in});  // [N, in]
    if (!t_tasks) {
      auto [dw, db] = weight_grads(x2, dy2, need_b);
      return {dx, need_w ? dw : Tensor(), db};
    }
    // Later (W): the gradients go into the leaves through the engine (accumulation and hooks as
    // in a plain backward). The leaves are the parameters the forward used.
    const auto leaves = std::any_cast<std::vector<Tensor>>(ctx.state);
    t_tasks->push_back([x2, dy2, need_w, need_b, leaves] {
      auto [dw, db] = weight_grads(x2, dy2, need_b);
      std::vector<Tensor> roots, grads;
      if (need_w) roots.push_back(leaves[0]), grads.push_back(dw);
      if (need_b) roots.push_back(leaves[1]), grads.push_back(db);
      autograd::backward(roots, grads);
    });
    return {dx, Tensor(), Tensor()};
  }
};

}  // namespace

WeightGradCapture::WeightGradCapture(WeightGradTasks* tasks) : prev_(t_tasks) {
  t_tasks = tasks;
}
WeightGradCapture::~WeightGradCapture() {
  t_tasks = prev_;
}

Tensor deferred_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return autograd::apply_function<DeferredLinear>({x, w, b})[0];
}

void install_deferred_linears(nn::Module& root) {
  for (auto& [fqn, m] : root.named_modules())
    if (auto* lin = dynamic_cast<nn::Linear*>(m)) {
      if (lin->has_kernel())
        HP_THROW(ValueError, "pipeline", "zero-bubble schedules split the backward of linear ",
                 "layers, but ", fqn, " already runs another GEMM kernel (MXFP8?)");
      lin->set_kernel(deferred_linear);
    }
}

}  // namespace hp::pipeline
