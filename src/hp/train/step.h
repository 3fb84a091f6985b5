// One training step's forward and backward (trainer.h): the micro-batches of the step run through
// the model, their gradients accumulated (FSDP reduces them; the trainer clips and steps). The
// plain step runs them one after the other; the pipeline step (pipeline_step.h) through a
// pipeline schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hp/data/loader.h"
#include "hp/models/generate.h"
#include "hp/train/config.h"
#include "hp/train/layout.h"
#include "hp/train/records.h"
#include "hp/train/run_dir.h"

namespace hp::train {

struct StepOutcome {
  double loss_sum = 0;  // this rank's Σ over its micro-batches of mean loss · targets
  // A stop signal every rank agreed on between micro-batches (0: none): the step is incomplete
  // and must be dropped.
  int stop_signal = 0;
};

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  // Forward and backward of the step's training.grad_accum micro-batches of micro_rows rows from
  // `loader`, each micro-batch's mean loss weighted by its targets / global_targets (the step's
  // targets over every rank), so the summed gradients are those of the global mean loss. A step
  // may end early at a stop `signals` agree on. Collective.
  virtual StepOutcome run(data::DataLoader& loader, int64_t micro_rows, int64_t global_targets,
                          const StopSignals& signals) = 0;
  // Adds what the step measured beyond the trainer's own figures to its record.
  virtual void record(StepRecord*) const {}
  // One line for the run log ("" = none).
  virtual std::string describe() const { return {}; }
  // For generating from the trained model (the end-of-run sample): the logits after ids when the
  // model is not whole on this rank (pipeline stages), else null (generate runs the model).
  virtual models::SequenceLogits sequence_logits() { return {}; }
  // Validation: this rank's Σ mean loss · targets of a batch's forward (no tape), as a step
  // computes its loss (0 on ranks that hold no loss: pipeline stages but the last). Collective.
  virtual double eval_batch(const data::Batch& batch) = 0;
};

// After a micro-batch's forward of decoder layers [begin, end) (RunSetup::after_forward: the MoE
// bias balancer counts their expert loads).
using AfterForward = std::function<void(int64_t begin, int64_t end)>;

// pp = 1: the micro-batches one after the other; between two of them every rank asks for a stop
// signal (one all-reduce), so all leave together. `after_forward` runs after each micro-batch's
// forward, over all layers.
class PlainStep : public TrainStep {
 public:
  PlainStep(models::CausalLM& model, const Layout& layout, const Config& cfg,
            const DocumentFlags& documents, dist::Communicator& world,
            AfterForward after_forward);
  StepOutcome run(data::DataLoader& loader, int64_t micro_rows, int64_t global_targets,
                  const StopSignals& signals) override;
  double eval_batch(const data::Batch& batch) override;

 private:
  models::CausalLM& model_;
  const Layout& layout_;
  DocumentFlags documents_;
  int64_t grad_accum_;
  dist::Communicator& world_;
  AfterForward after_forward_;
};

}  // namespace hp::train
