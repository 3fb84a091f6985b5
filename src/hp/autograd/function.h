// Custom autograd functions: forward and backward written by hand (MX linear, MegaMoE, fused ops).
//
//   struct MyOp {
//     static constexpr const char* kName = "MyOp";
//     static std::vector<Tensor> forward(FunctionCtx& ctx, const std::vector<Tensor>& inputs);
//     static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grad_outputs);
//   };
//   auto outs = autograd::apply_function<MyOp>({x, w});
//
// forward runs with grad mode off; backward returns one gradient per input (undefined when
// ctx.needs_input_grad[i] is false). Built on `record`, like every built-in op.
#pragma once

#include <any>
#include <memory>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/profiler.h"

namespace hp::autograd {

class FunctionCtx {
 public:
  // Saved through the saved-tensor hooks active now (offload may move them).
  void save_for_backward(const std::vector<Tensor>& tensors) {
    for (const Tensor& t : tensors) saved_.emplace_back(t);
  }
  std::vector<Tensor> saved_tensors() const {
    std::vector<Tensor> out;
    for (const auto& s : saved_) out.push_back(s.unpack());
    return out;
  }
  std::vector<bool> needs_input_grad;
  std::any state;  // non-tensor data the backward needs (shapes, flags, quantization scales)

 private:
  std::vector<SavedTensor> saved_;
};

// `options`: non-tensor arguments of this call, handed to F::forward as ctx.state (which forward
// may then replace with what its backward needs).
template <class F>
std::vector<Tensor> apply_function(const std::vector<Tensor>& inputs, std::any options = {}) {
  HP_PROFILE_OP(F::kName);
  auto ctx = std::make_shared<FunctionCtx>();
  ctx->state = std::move(options);
  for (const Tensor& t : inputs) ctx->needs_input_grad.push_back(t.defined() && t.requires_grad());
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = F::forward(*ctx, inputs);
  }
  // An output that is an input (or already on the tape) gets a fresh alias to carry the new node.
  for (Tensor& o : outs)
    if (o.grad_fn() || o.requires_grad()) o = o.detach();
  record(F::kName, inputs, outs,
         [ctx](const std::vector<Tensor>& grads) { return F::backward(*ctx, grads); });
  return outs;
}

}  // namespace hp::autograd
