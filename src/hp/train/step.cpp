// The plain training step (step.h).
#include "hp/train/step.h"

#include "hp/core/allocator.h"
#include "hp/core/profiler.h"
#include "hp/dist/communicator.h"
#include "hp/ops/ops.h"
#include "hp/train/loss.h"

namespace hp::train {

PlainStep::PlainStep(models::CausalLM& model, const Layout& layout, const Config& cfg,
                     const DocumentFlags& documents, dist::Communicator& world,
                     AfterForward after_forward)
    : model_(model),
      layout_(layout),
      documents_(documents),
      grad_accum_(cfg.training.grad_accum),
      world_(world),
      after_forward_(std::move(after_forward)) {}

StepOutcome PlainStep::run(data::DataLoader& loader, int64_t micro_rows, int64_t global_targets,
                           const StopSignals& signals) {
  StepOutcome out;
  for (int64_t m = 0; m < grad_accum_; ++m) {
    if (m > 0 && (out.stop_signal = signals.agreed(world_)) != 0) break;
    const data::Batch batch = loader.next(micro_rows, layout_.dp_rank, layout_.dp_size);
    const MemCategoryScope as_activations(MemCategory::activations);
    BatchLoss loss;
    {
      const profiler::Scope phase(profiler::Phase::forward);
      loss = batch_loss(model_, batch, documents_);
    }
    after_forward_(0, model_.config().num_hidden_layers);
    out.loss_sum += loss.mean.item() * double(loss.tokens);
    // d(Σ token losses / global tokens): FSDP sums the shards' gradients over ranks.
    const profiler::Scope phase(profiler::Phase::backward);
    mul(loss.mean, double(loss.tokens) / double(global_targets)).backward();
  }
  return out;
}

double PlainStep::eval_batch(const data::Batch& batch) {
  const BatchLoss l = batch_loss(model_, batch, documents_);
  return l.mean.item() * double(l.tokens);
}

}  // namespace hp::train
