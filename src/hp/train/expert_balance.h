// DeepSeek-V3's auxiliary-loss-free load balancing (arXiv 2412.19437, §2.1.2): after every
// optimizer step, each MoE layer's router correction bias `gate.e_score_correction_bias` [E] moves
// by rate · sign(mean load − load_e), where load_e counts the top-k assignments to expert e over
// the step's whole global batch (every micro-batch, every data-parallel and cp rank). The bias
// only steers which experts are selected, never the weights they get, so an overloaded expert is
// chosen less without an auxiliary loss. For routers that have the bias (sigmoid group-limited
// top-k); `model.router_bias_update_rate` (0 = off). The bias is a parameter (saved and resumed
// with the model) that no optimizer steps.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/optim/optimizer.h"
#include "hp/train/parallelize.h"

namespace hp::models {
class MoEBlock;
}

namespace hp::train {

class ExpertBiasBalancer {
 public:
  // Finds every MoE block with a correction bias and the master rows of that bias `par` holds.
  // Throws ValueError("[train] ...") when rate > 0 and the model has none (no rank holds one:
  // collective over the world when rate > 0).
  ExpertBiasBalancer(models::CausalLM& model, const Parallelized& par, const Layout& layout,
                     double rate);
  bool active() const { return rate_ > 0 && !layers_.empty(); }
  // At the start of a step (a dropped or skipped step leaves counts behind).
  void clear();
  // After a micro-batch's forward of decoder layers [begin, end) (a pipeline stage's, or all):
  // adds those layers' blocks' assignment counts of that forward.
  void accumulate(int64_t begin, int64_t end);
  // After the optimizer step: sums the counts over the ranks with distinct tokens (dp_shard × cp,
  // then dp_replicate), moves this rank's rows of every bias, and clears the counts. Collective.
  void step();
  // The FQNs of the biases (what the optimizer must leave alone).
  std::vector<std::string> bias_fqns() const;

 private:
  struct Layer {
    std::string fqn;  // of the bias
    int64_t layer = 0;  // the decoder layer of the block
    const models::MoEBlock* block;
    Tensor master;    // this rank's f32 rows [row0, row0 + n) of the bias
    int64_t row0 = 0;
    std::vector<double> counts;  // [E], this step so far
  };
  std::vector<Layer> layers_;
  Layout layout_;
  double rate_;
};

// Installs the balancer of `model.router_bias_update_rate` (`rate`) into `opt`: its counts clear at
// every zero_grad() and move the biases after every step() (optim::Optimizer::Hook), so the
// trainer's loop does not know about it. Returns what must run after each micro-batch's forward
// of decoder layers [begin, end) (a no-op when the balancer is inactive). Throws as the
// constructor does.
std::function<void(int64_t, int64_t)> install_expert_balance(models::CausalLM& model, const Parallelized& par,
                                             const Layout& layout, double rate,
                                             optim::Optimizer& opt);

}  // namespace hp::train
