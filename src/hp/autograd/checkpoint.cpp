#include "hp/autograd/checkpoint.h"

#include "hp/autograd/engine.h"
#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/random.h"

namespace hp::autograd {

std::vector<Tensor> checkpoint(const RegionFn& fn, const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return fn(inputs);
  const RngState rng = default_generator().state();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  std::vector<SavedTensor> saved;
  std::vector<bool> needs;
  for (const Tensor& t : inputs) {
    saved.emplace_back(t);
    needs.push_back(t.defined() && t.requires_grad());
  }
  for (Tensor& o : outs)
    if (o.grad_fn() || o.requires_grad()) o = o.detach();
  record(
      "Checkpoint", inputs, outs,
      [fn, saved, needs, rng](const std::vector<Tensor>& grads) {
        Generator& gen = default_generator();
        const RngState now = gen.state();
        gen.set_state(rng);
        std::vector<Tensor> leaves;
        for (size_t i = 0; i < saved.size(); ++i) {
          Tensor t = saved[i].unpack();
          if (t.defined()) {
            t = t.detach();
            if (needs[i]) t.requires_grad_();
          }
          leaves.push_back(t);
        }
        std::vector<Tensor> again;
        {
          EnableGradGuard grad_on;
          again = fn(leaves);
        }
        gen.set_state(now);
        std::vector<Tensor> roots, seeds;
        for (size_t k = 0; k < again.size() && k < grads.size(); ++k) {
          if (again[k].requires_grad() && grads[k].defined()) {
            roots.push_back(again[k]);
            seeds.push_back(grads[k]);
          }
        }
        if (!roots.empty()) backward(roots, seeds, false);
        std::vector<Tensor> out;
        for (size_t i = 0; i < leaves.size(); ++i) out.push_back(needs[i] ? leaves[i].grad() : Tensor());
        return out;
      },
      /*force=*/true);
  return outs;
}

}  // namespace hp::autograd
