// Validation (eval.*) and the loss arithmetic it shares with the training step.
//
// A validation pass runs eval.steps batches of eval.batch_size sequences of the validation set —
// the same batches every time: windows in stream order from its start, no shuffle — forward only
// (no_grad: no tape, no gradient, no optimizer) through the model in its training layout, so it
// works wherever training does (FSDP gathers per group, tp's vocabulary-parallel loss, cp's
// shares). The loss is the global token-weighted mean over every rank's rows, computed by the same
// two functions as the training loss (loss.h: batch_loss, global_mean_loss); perplexity = exp(loss).
// A pass draws no random numbers the run would see (the default generator is restored after it)
// and moves no training loader, so a run with validation trains bitwise as one without.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "hp/core/tensor.h"
#include "hp/data/loader.h"
#include "hp/train/config.h"
#include "hp/train/layout.h"
#include "hp/train/loss.h"
#include "hp/train/records.h"

namespace hp::fsdp {
class FsdpModel;
}
namespace hp::models {
class CausalLM;
}

namespace hp::train {

class TrainStep;

class Evaluator {
 public:
  // ValueError("[train] ...") when eval.batch_size (or its default) does not split into the
  // layout's data-parallel slices, or the set has fewer than seq_len + 1 tokens (data's error).
  // `documents`: the training run's packed-document flags, applied to the validation rows too.
  Evaluator(const Config& cfg, std::shared_ptr<const data::TokenDataset> data, const Layout& layout,
            const DocumentFlags& documents = {});
  // Whether a pass follows `step` (every eval.interval steps, and after the last one).
  bool due(int64_t step, bool last) const;
  // One pass. Collective: every rank of the layout calls it after the same step. Leaves every
  // parameter sharded (fsdp.reshard) and the default generator as it found it.
  // `step_loss`: the training step (TrainStep::eval_batch runs a batch as it runs its own).
  EvalResult run(TrainStep& step_loss, fsdp::FsdpModel& fsdp, int64_t step);
  // "eval: NAME, T tokens in D documents; N batches of B sequences every I steps".
  std::string describe(const std::string& name) const;
  // "eval step N: loss L  ppl P  (B batches, T tokens, S s)".
  static std::string format(const EvalResult& r);

 private:
  Layout layout_;
  data::DataLoader loader_;
  int64_t steps_, batch_, interval_, seq_len_;
};

}  // namespace hp::train
