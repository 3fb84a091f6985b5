// Pipeline parallelism in the trainer (docs/ARCHITECTURE.md §4b): step 0 of the parallelize step
// cuts the model into stages, and PipelineStep runs a training step's microbatches through the
// schedule (pipeline/schedule.h, pipeline/executor.h).
//
// Stages: parallel.pp × parallel.pipeline.virtual_stages chunks of consecutive decoder layers in
// model order (parallel.pipeline.layers_per_stage, or the cut that balances estimated forward
// FLOPs per token, the embedding counted with the first stage and the final norm, head and loss
// with the last); stage s runs on pipeline rank s % pp. A rank keeps only its stages' modules, FQNs
// unchanged, so checkpoints stay per parameter and any pp reloads them.
//
// The step: every rank reads the step's training.grad_accum micro-batches as without pp (the
// first stage needs the ids, the last the targets); the last stage's forward returns each
// microbatch's mean loss · its targets / the step's targets, exactly the scaled loss the pp = 1
// loop backpropagates, so the summed gradients equal the pp = 1 run's.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hp/data/loader.h"
#include "hp/pipeline/executor.h"
#include "hp/train/config.h"
#include "hp/train/parallelize.h"
#include "hp/train/step.h"

namespace hp::models {
class CausalLM;
}

namespace hp::train {

class StageRouterLoss;

class PipelineStep : public TrainStep {
 public:
  // `documents`: the run's packed-document flags; every stage's forward gets its micro-batch's
  // documents (the loader gives each rank the micro-batch's positions).
  // `after_forward` runs after each stage's forward of a micro-batch, over the stage's layers.
  PipelineStep(models::CausalLM& model, const Parallelized& par, const Layout& l,
               const Config& cfg, const DocumentFlags& documents, AfterForward after_forward);
  ~PipelineStep() override;
  // Runs the step's micro-batches (cfg.training.grad_accum of micro_rows rows from `loader`)
  // through the schedule; the loss sum is this rank's Σ of microbatch mean loss · targets (0
  // except on the last stage), as the plain step sums it. A stop waits for the step's end.
  StepOutcome run(data::DataLoader& loader, int64_t micro_rows, int64_t global_targets,
                  const StopSignals& signals) override;
  const pipeline::Schedule& schedule() const { return executor_->schedule(); }
  // Fills the step record's pp_ fields from the last step: every pipeline rank's measured bubble
  // (1 − its compute time / the longest schedule time of any rank), the schedule's theoretical
  // bubble at unit costs, the schedule simulated with the step's mean action times per stage
  // (each rank's bubble at the real costs) and those times, and each rank's compute, receive
  // wait and schedule seconds.
  void record(StepRecord* r) const override;
  // One line for the run log: the schedule, the cut and the theoretical bubble.
  std::string describe() const override;
  // The stages' forwards in stage order, each rank's output sent on to the next stage's rank; the
  // last stage's logits at the last position are broadcast to every pipeline rank. Collective
  // over the pipeline group (equal stages only: parallel.pipeline.stage_ranks of one size).
  models::SequenceLogits sequence_logits() override;
  // The stages' forward of the batch (forward_stages), the last stage's loss (with the router
  // loss's statistics passed along).
  double eval_batch(const data::Batch& batch) override;

 private:
  // The stages' forwards of ids [B, T] in stage order outside the schedule (generation,
  // validation): each rank sends its stage's output on to the next stage's rank. The last stage's
  // output on its ranks, undefined elsewhere. `router`: the router loss's statistics travel along
  // (micro-batch 0's messages) for the last stage's StageRouterLoss::last_stage_term.
  // `docs`: the batch's packed documents (document_context), or none.
  Tensor forward_stages(const Tensor& ids, models::AttentionContext docs, bool router);

  models::CausalLM& model_;
  const Layout& layout_;
  DocumentFlags documents_;
  std::vector<int64_t> layers_per_stage_;
  AfterForward after_forward_;
  std::unique_ptr<pipeline::Executor> executor_;
  // The router load-balancing loss across stages (null when the model has none).
  std::unique_ptr<StageRouterLoss> router_loss_;
  // The step being run: its micro-batches, the step's targets, the loss sum so far.
  std::vector<data::Batch> batches_;
  int64_t global_targets_ = 1;
  double loss_sum_ = 0;
  std::vector<double> measured_, modeled_, rank_s_;
  std::vector<pipeline::Costs> action_costs_;
  double theory_ = 0;
};

}  // namespace hp::train
