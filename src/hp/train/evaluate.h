// Validation (eval.*) and the loss arithmetic it shares with the training step.
//
// A validation pass runs eval.steps batches of eval.batch_size sequences of the validation set —
// the same batches every time: windows in stream order from its start, no shuffle — forward only
// (no_grad: no tape, no gradient, no optimizer) through the model in its training layout, so it
// works wherever training does (FSDP gathers per group, tp's vocabulary-parallel loss, cp's
// shares). The loss is the global token-weighted mean over every rank's rows, computed by the same
// two functions as the training loss (batch_loss, global_mean_loss); perplexity = exp(loss).
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
#include "hp/train/parallelize.h"

namespace hp::models {
class CausalLM;
struct PackedDocuments;
}

namespace hp::train {

// This rank's loss on a batch's rows ([rows, seq_len + 1] windows): CausalLM::loss — the mean over
// the rows' targets (with a loss mask, the unmasked ones: batch.labels), under cp this rank's
// share of it — and the targets it stands for (batch.targets: rows · seq_len without a mask), so
// mean · tokens summed over the ranks, / tp, is the batch's Σ of token losses.
struct BatchLoss {
  Tensor mean;
  int64_t tokens = 0;
};
// `documents`: the run's packed-document flags (batch.positions must be defined when any is on).
BatchLoss batch_loss(models::CausalLM& model, const data::Batch& batch,
                     const DocumentFlags& documents = {});
// The packed documents of `batch` under the run's flags (none when no flag is on).
models::PackedDocuments packed_documents(const data::Batch& batch, const DocumentFlags& documents);

// Σ over every rank of `local_sum` (this rank's Σ mean · tokens), counting the tp ranks of a
// data-parallel slice once, / global_tokens: the global token-weighted mean. Collective.
double global_mean_loss(dist::Communicator& world, const Layout& layout, double local_sum,
                        int64_t global_tokens);

struct EvalResult {
  int64_t step = 0;  // the optimizer step evaluated after
  double loss = 0, ppl = 0;
  int64_t batches = 0, tokens = 0;  // global
  double seconds = 0;
};

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
  EvalResult run(models::CausalLM& model, fsdp::FsdpModel& fsdp, int64_t step);
  // "eval: NAME, T tokens in D documents; N batches of B sequences every I steps".
  std::string describe(const std::string& name) const;
  // "eval step N: loss L  ppl P  (B batches, T tokens, S s)".
  static std::string format(const EvalResult& r);

 private:
  Layout layout_;
  data::DataLoader loader_;
  DocumentFlags documents_;
  int64_t steps_, batch_, interval_, seq_len_;
};

// `hp eval CONFIG --resume PATH`: builds the run as `hp train` does (build_run), loads the
// checkpoint `resume` names (resolve_resume: a step or run directory, or auto), runs one pass and
// prints Evaluator::format on `log` (rank 0). ValueError("[eval] ...") naming `config_file` when
// the config has no eval section, or when there is no checkpoint. Collective.
EvalResult evaluate_checkpoint(const Config& cfg, const std::string& config_file,
                               const std::string& resume, std::ostream& log);

}  // namespace hp::train
