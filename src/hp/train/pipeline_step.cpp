// Pipeline parallelism in the trainer (pipeline_step.h).
#include "hp/train/pipeline_step.h"

#include <algorithm>
#include <sstream>

#include "hp/autograd/grad_mode.h"
#include "hp/core/error.h"
#include "hp/dist/communicator.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"
#include "hp/pipeline/stage.h"
#include "hp/pipeline/weight_grad.h"
#include "hp/train/loss.h"
#include "hp/train/options.h"
#include "hp/train/pipeline_router_loss.h"
#include "hp/train/records.h"

namespace hp::train {

PipelineStep::PipelineStep(models::CausalLM& model, const Parallelized& par, const Layout& l,
                           const Config& cfg, const DocumentFlags& documents,
                           AfterForward after_forward)
    : model_(model),
      layout_(l),
      documents_(documents),
      layers_per_stage_(par.layers_per_stage),
      after_forward_(std::move(after_forward)) {
  pipeline::Schedule schedule = pipeline::build_schedule(pipeline_spec(cfg));
  // Zero bubble: the linears' weight gradients wait for W. FSDP holds every stage's gradients
  // until finish_grads (fsdp_options: reduce_at_finish), so W adds into them as a plain backward
  // would; low_precision.recipe mxfp8 is refused by the config check.
  if (pipeline::splits_backward(schedule.spec.kind)) pipeline::install_deferred_linears(model);
  const auto ranges = pipeline::stage_ranges(layers_per_stage_);
  const int64_t last = schedule.num_stages - 1;
  std::vector<pipeline::StageFn> fns;
  for (int64_t s : schedule.stages_of_rank(l.pp_rank)) {
    // (Plain variables: clang before 16 cannot capture structured bindings in the lambda.)
    const int64_t begin = ranges[size_t(s)].first, end = ranges[size_t(s)].second;
    pipeline::StageFn f;
    f.stage = s;
    f.forward = [this, begin, end, s, last](int64_t mb, const Tensor& x) {
      const data::Batch& b = batches_[size_t(mb)];
      models::AttentionContext docs =
          model_.document_context(b.ids, packed_documents(b, documents_));
      docs.ids = b.ids;
      const Tensor h = model_.run_layers(x, begin, end, &docs);
      after_forward_(begin, end);
      // d(Σ token losses / the step's targets), as the pp = 1 loop scales each micro-batch.
      const double weight = double(b.targets) / double(global_targets_);
      if (s != last)
        return router_loss_ ? router_loss_->stage_output(mb, s, begin, end, h, weight) : h;
      Tensor mean = model_.loss_from_hidden(h, b.ids, b.labels, /*router_loss=*/!router_loss_);
      if (router_loss_) mean = add(mean, router_loss_->last_stage_term(mb, begin, end));
      loss_sum_ += mean.item() * double(b.targets);
      return mul(mean, weight);
    };
    fns.push_back(std::move(f));
  }
  theory_ = pipeline::simulate(schedule).bubble_fraction();
  if (!l.heterogeneous()) {
    executor_ =
        std::make_unique<pipeline::Executor>(std::move(schedule), l.pp_comm, std::move(fns));
    if (model.has_router_loss())
      router_loss_ = std::make_unique<StageRouterLoss>(model, executor_->schedule(), l.pp_comm);
    return;
  }
  // (The config refuses the router loss over stages of different rank counts.)
  HP_CHECK(!model.has_router_loss(), "a router load-balancing loss over unequal stages");
  // Stages of different rank counts: each stage's ranks hold their torch.chunk share of a
  // micro-batch's rows (the loader's split), and transfers reshard rows between stages.
  pipeline::StagePlacement placement;
  placement.rows = cfg.training.batch_size / cfg.training.grad_accum;
  int first = 0;
  for (int64_t size : l.stage_sizes) {
    std::vector<int>& ranks = placement.ranks.emplace_back();
    for (int64_t i = 0; i < size; ++i) ranks.push_back(first++);
  }
  executor_ = std::make_unique<pipeline::Executor>(std::move(schedule), dist::world(),
                                                   std::move(fns), std::move(placement));
}

PipelineStep::~PipelineStep() = default;

StepOutcome PipelineStep::run(data::DataLoader& loader, int64_t micro_rows, int64_t global_targets,
                              const StopSignals& /*signals*/) {
  const int64_t m = executor_->schedule().spec.microbatches;
  batches_.clear();
  for (int64_t i = 0; i < m; ++i)
    batches_.push_back(loader.next(micro_rows, layout_.dp_rank, layout_.dp_size));
  global_targets_ = global_targets;
  loss_sum_ = 0;
  const pipeline::ExecutorStats st =
      executor_->run([this](int64_t mb) { return batches_[size_t(mb)].ids; });
  if (router_loss_) router_loss_->finish();
  batches_.clear();
  // Every rank's (pipeline rank, compute, schedule time, receive wait, then per stage its F, B, I,
  // W seconds): [ranks, 4 + 4 · stages]; a stage's times are the mean of its ranks'.
  const pipeline::Schedule& s = executor_->schedule();
  const auto n = static_cast<size_t>(s.num_stages);
  std::vector<double> row = {double(layout_.pp_rank), st.compute_s, st.total_s, st.wait_s};
  for (const pipeline::Costs& c : st.stage_s)
    row.insert(row.end(), {c.forward, c.backward, c.backward_input, c.backward_weight});
  const dist::CommPtr comm = layout_.pp_comm ? layout_.pp_comm : dist::world();
  const Tensor times = comm->all_gather(from_data<double>(row, {1, int64_t(row.size())}));
  const std::vector<double> v = times.to_vector();
  double span = 0;
  std::vector<double> compute(size_t(layout_.pp), 0.0), ranks(size_t(layout_.pp), 0.0);
  std::vector<double> total(size_t(layout_.pp), 0.0), wait(size_t(layout_.pp), 0.0);
  std::vector<pipeline::Costs> costs(n, pipeline::Costs{0, 0, 0, 0, 0});
  for (size_t i = 0; i < v.size(); i += row.size()) {
    const auto r = size_t(v[i]);
    compute[r] += v[i + 1];
    total[r] += v[i + 2];
    wait[r] += v[i + 3];
    ranks[r] += 1;
    span = std::max(span, v[i + 2]);
    for (size_t k = 0; k < n; ++k) {
      const double* a = &v[i + 4 + 4 * k];
      costs[k].forward += a[0], costs[k].backward += a[1];
      costs[k].backward_input += a[2], costs[k].backward_weight += a[3];
    }
  }
  // The mean action time of each stage: over its microbatches and its ranks.
  for (size_t k = 0; k < n; ++k) {
    const double d = double(m) * ranks[size_t(s.rank_of_stage(int64_t(k)))];
    costs[k] = {costs[k].forward / d, costs[k].backward / d, costs[k].backward_input / d,
                costs[k].backward_weight / d, 0};
  }
  action_costs_ = costs;
  const pipeline::Timeline model = pipeline::simulate(s, costs);
  measured_.clear();
  modeled_.clear();
  rank_s_.clear();
  for (size_t k = 0; k < compute.size(); ++k) {
    measured_.push_back(span > 0 && ranks[k] > 0 ? 1.0 - compute[k] / ranks[k] / span : 0.0);
    modeled_.push_back(model.makespan > 0 ? 1.0 - model.busy[k] / model.makespan : 0.0);
    const double d = std::max(ranks[k], 1.0);
    rank_s_.insert(rank_s_.end(), {compute[k] / d, wait[k] / d, total[k] / d});
  }
  return {loss_sum_, 0};
}

namespace {

// Inference transfers between stages: pipeline/executor.h's header protocol, on tags apart from
// the executor's (which are per microbatch and stage).
constexpr int kInferHeaderTag = 1 << 20, kInferDataTag = kInferHeaderTag + 1;

void send_activation(dist::Communicator& comm, const Tensor& t, int dst) {
  comm.send(pipeline::transfer_header(t), dst, kInferHeaderTag);
  comm.send(t.contiguous(), dst, kInferDataTag);
}

Tensor recv_activation(dist::Communicator& comm, int src) {
  const auto [shape, dtype] = pipeline::parse_transfer_header(
      comm.recv({pipeline::kTransferHeader}, DType::i64, src, kInferHeaderTag));
  return comm.recv(shape, dtype, src, kInferDataTag);
}

}  // namespace

Tensor PipelineStep::forward_stages(const Tensor& ids, models::AttentionContext docs, bool router) {
  docs.ids = ids;
  HP_CHECK(layout_.pp_comm != nullptr, "a forward over stages of different rank counts");
  const pipeline::Schedule& s = executor_->schedule();
  const auto ranges = pipeline::stage_ranges(layers_per_stage_);
  dist::Communicator& comm = *layout_.pp_comm;
  const int me = layout_.pp_rank;
  const int64_t last = s.num_stages - 1;
  Tensor h = ids;  // the first stage's input; then each stage's output
  for (int64_t st = 0; st <= last; ++st) {
    const int rank = static_cast<int>(s.rank_of_stage(st));
    const int prev = st == 0 ? rank : static_cast<int>(s.rank_of_stage(st - 1));
    if (prev != rank && me == prev) send_activation(comm, h, rank);
    if (prev != rank && me == rank) h = recv_activation(comm, prev);
    if (me != rank) continue;
    const int64_t begin = ranges[size_t(st)].first, end = ranges[size_t(st)].second;
    h = model_.run_layers(h, begin, end, &docs);
    if (router && router_loss_ && st != last)
      h = router_loss_->stage_output(0, st, begin, end, h, 1);
  }
  return me == static_cast<int>(s.rank_of_stage(last)) ? h : Tensor();
}

models::SequenceLogits PipelineStep::sequence_logits() {
  return [this](const Tensor& ids) {
    autograd::NoGradGuard no_grad;
    const Tensor h = forward_stages(ids, {}, /*router=*/false);
    const int64_t vocab = model_.config().vocab_size;
    Tensor logits = zeros({vocab}, DType::f32);
    if (h.defined()) {
      const Tensor all = model_.logits_from_hidden(h);  // [1, T, V]
      logits = cast(reshape(narrow(all, 1, all.size(1) - 1, 1).contiguous(), {vocab}), DType::f32);
    }
    const pipeline::Schedule& s = executor_->schedule();
    return layout_.pp_comm->broadcast(logits, static_cast<int>(s.rank_of_stage(s.num_stages - 1)))
        .to_vector_as<float>();
  };
}

double PipelineStep::eval_batch(const data::Batch& b) {
  autograd::NoGradGuard no_grad;
  const models::AttentionContext docs =
      model_.document_context(b.ids, packed_documents(b, documents_));
  const Tensor h = forward_stages(b.ids, docs, /*router=*/true);
  double sum = 0;  // the loss is the last stage's
  if (h.defined()) {
    const auto range = pipeline::stage_ranges(layers_per_stage_).back();
    Tensor mean = model_.loss_from_hidden(h, b.ids, b.labels, /*router_loss=*/!router_loss_);
    if (router_loss_) mean = add(mean, router_loss_->last_stage_term(0, range.first, range.second));
    sum = mean.item() * double(b.targets);
  }
  if (router_loss_) router_loss_->finish();
  return sum;
}

void PipelineStep::record(StepRecord* r) const {
  r->pp_bubble = measured_;
  r->pp_bubble_theory = theory_;
  r->pp_bubble_model = modeled_;
  r->pp_rank_s = rank_s_;
  r->pp_action_s.clear();
  for (const pipeline::Costs& c : action_costs_)
    r->pp_action_s.insert(r->pp_action_s.end(),
                          {c.forward, c.backward, c.backward_input, c.backward_weight});
}

std::string PipelineStep::describe() const {
  const pipeline::Schedule& s = executor_->schedule();
  std::ostringstream o;
  o << "pipeline: pp " << s.spec.ranks << ", schedule " << schedule_kind_name(s.spec.kind) << ", "
    << s.spec.microbatches << " microbatches, " << s.num_stages << " stages of [";
  for (size_t i = 0; i < layers_per_stage_.size(); ++i)
    o << (i ? ", " : "") << layers_per_stage_[i];
  o << "] layers (the embedding with the first, the head with the last)";
  if (layout_.heterogeneous()) {
    o << " on [";
    for (size_t i = 0; i < layout_.stage_sizes.size(); ++i)
      o << (i ? ", " : "") << layout_.stage_sizes[i];
    o << "] ranks (FSDP inside each, activations resharded by rows)";
  }
  o << "; theoretical bubble " << theory_;
  return o.str();
}

}  // namespace hp::train
