// Validation passes and `hp eval` (evaluate.h).
#include "hp/train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "hp/autograd/grad_mode.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/dist/communicator.h"
#include "hp/fsdp/fsdp.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"
#include "hp/train/step.h"

namespace hp::train {

namespace {

int64_t eval_batch(const Config& cfg, const Layout& layout) {
  const int64_t batch = cfg.eval.batch_size > 0 ? cfg.eval.batch_size
                                                : cfg.training.batch_size / cfg.training.grad_accum;
  // Every data-parallel slice needs rows: its ranks' FSDP gathers pair with every other slice's.
  if (batch % layout.dp_size != 0)
    HP_THROW(ValueError, "train", "eval.batch_size = ", batch,
             cfg.eval.batch_size > 0 ? "" : " (training.batch_size / training.grad_accum)",
             " does not split into the ", layout.dp_size,
             " data-parallel slices (dp_shard × dp_replicate) equally");
  return batch;
}

}  // namespace

Evaluator::Evaluator(const Config& cfg, std::shared_ptr<const data::TokenDataset> data,
                     const Layout& layout, const DocumentFlags& documents)
    : layout_(layout),
      loader_(std::move(data), cfg.training.seq_len, static_cast<uint64_t>(cfg.training.seed),
              /*shuffle=*/false),
      steps_(cfg.eval.steps),
      batch_(eval_batch(cfg, layout)),
      interval_(cfg.eval.interval),
      seq_len_(cfg.training.seq_len) {
  loader_.set_document_positions(documents.any());
}

bool Evaluator::due(int64_t step, bool last) const {
  return last || (interval_ > 0 && step % interval_ == 0);
}

EvalResult Evaluator::run(TrainStep& step_loss, fsdp::FsdpModel& fsdp, int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const RngState rng = default_generator().state();
  autograd::NoGradGuard no_grad;
  loader_.set_state({});  // the same batches every pass
  double local_sum = 0;   // Σ mean · tokens over this rank's batches
  int64_t targets = 0;    // global
  for (int64_t b = 0; b < steps_; ++b) {
    const data::Batch batch = loader_.next(batch_, layout_.dp_rank, layout_.dp_size);
    local_sum += step_loss.eval_batch(batch);
    targets += batch.global_targets;
  }
  fsdp.reshard();  // the next training forward gathers the masters afresh
  default_generator().set_state(rng);
  EvalResult r;
  r.step = step;
  r.batches = steps_;
  r.tokens = targets;  // steps · batch · seq_len without a loss mask
  r.loss = global_mean_loss(*dist::world(), layout_, local_sum, std::max<int64_t>(r.tokens, 1));
  r.ppl = std::exp(r.loss);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string Evaluator::describe(const std::string& name) const {
  const data::TokenDataset& d = loader_.dataset();
  return detail::cat("eval: ", name, ", ", d.size(), " tokens in ", d.num_documents(),
                     " documents; ", steps_, " batches of ", batch_, " sequences",
                     interval_ > 0 ? detail::cat(" every ", interval_, " steps and") : "",
                     " after the last step");
}

std::string Evaluator::format(const EvalResult& r) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "eval step %lld: loss %.6f  ppl %.4f  (%lld batches, %lld tokens, "
                "%.2f s)",
                (long long)r.step, r.loss, r.ppl, (long long)r.batches, (long long)r.tokens,
                r.seconds);
  return buf;
}

}  // namespace hp::train
