#include "hp/optim/optimizer.h"

#include <cmath>
#include <map>
#include <set>

#include "hp/core/thread_pool.h"
#include "hp/optim/kernels.h"
#include "hp/optim/muon_ortho.h"
#include "hp/optim/state_offload.h"

namespace hp::optim {

Algorithm algorithm_from_name(std::string_view name) {
  if (name == "adamw") return Algorithm::adamw;
  if (name == "muon") return Algorithm::muon;
  if (name == "auto") return Algorithm::auto_select;
  HP_THROW(ValueError, "optim", "unknown optimizer '", name, "' (expected adamw|muon|auto)");
}

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::adamw:
      return "adamw";
    case Algorithm::muon:
      return "muon";
    case Algorithm::auto_select:
      return "auto";
  }
  return "?";
}

MuonScale muon_scale_from_name(std::string_view name) {
  if (name == "rms_match") return MuonScale::rms_match;
  if (name == "shape") return MuonScale::shape;
  HP_THROW(ValueError, "optim", "unknown muon update_scale '", name,
           "' (expected rms_match|shape)");
}

std::string_view muon_scale_name(MuonScale s) {
  return s == MuonScale::rms_match ? "rms_match" : "shape";
}

double muon_update_scale(MuonScale s, int64_t rows, int64_t cols) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  if (s == MuonScale::rms_match) return 0.2 * std::sqrt(std::max(r, c));
  return std::sqrt(std::max(1.0, r / c));
}

Optimizer::Optimizer(std::vector<NamedTensor> params, OptimizerOptions options)
    : Optimizer(std::move(params), std::move(options), {}) {}

Optimizer::Optimizer(std::vector<NamedTensor> params, OptimizerOptions options,
                     std::map<std::string, ShardSpec> shards)
    : options_(std::move(options)) {
  std::set<std::string> seen;
  for (size_t gi = 0; gi < options_.groups.size(); ++gi)
    if (options_.groups[gi].name.empty())
      options_.groups[gi].name = "groups[" + std::to_string(gi) + "]";
  for (auto& [fqn, t] : params) {
    if (!t.defined()) HP_THROW(ValueError, "optim", fqn, ": undefined parameter");
    if (!seen.insert(fqn).second) HP_THROW(ValueError, "optim", fqn, ": duplicate parameter FQN");
    if (t.dtype() != DType::f32 || !t.is_contiguous())
      HP_THROW(ValueError, "optim", fqn, ": parameters must be contiguous f32 master weights, got ",
               t.desc());
    Entry e;
    e.fqn = fqn;
    e.param = t;
    e.group = "default";
    Algorithm algo = options_.default_algorithm;
    const ParamGroup* group = nullptr;
    for (const auto& g : options_.groups) {
      for (const auto& pat : g.globs)
        if (glob_match(pat, fqn)) group = &g;
      if (group) break;
    }
    if (group) {
      algo = group->algorithm;
      e.group = group->name;
      e.lr_scale = group->lr_scale;
    }
    if (algo == Algorithm::auto_select) algo = t.dim() >= 2 ? Algorithm::muon : Algorithm::adamw;
    if (algo == Algorithm::muon && t.dim() < 2)
      HP_THROW(ValueError, "optim", fqn, ": muon (group ", e.group, ") needs a matrix, got ",
               t.desc(), "; route it to adamw with a group glob");
    e.algorithm = algo;
    e.weight_decay =
        algo == Algorithm::muon ? options_.muon.weight_decay : options_.adamw.weight_decay;
    if (group && group->weight_decay) e.weight_decay = *group->weight_decay;
    entries_.push_back(std::move(e));
  }
  if (!shards.empty()) attach_shards(std::move(shards));
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.param);
  return out;
}

void Optimizer::zero_grad() {
  for (auto& e : entries_) e.param.zero_grad();
  for (const Hook& h : hooks_)
    if (h.after_zero_grad) h.after_zero_grad();
}

Optimizer::~Optimizer() = default;

void Optimizer::set_state_offload(StateOffloadOptions o) {
  for (const Entry& e : entries_)
    HP_CHECK(e.step == 0, "set_state_offload after ", e.fqn, " was stepped");
  offload_.reset();
  if (o.placement != StatePlacement::device)
    offload_ = std::make_unique<StateOffload>(entries_, std::move(o));
}

TransferStats Optimizer::transfer_stats() const {
  return offload_ ? offload_->stats() : TransferStats{};
}

MemTier Optimizer::state_tier() const { return offload_ ? offload_->tier() : MemTier::device; }

void Optimizer::step(double lr, double grad_scale) {
  if (!std::isfinite(lr) || lr < 0) HP_THROW(ValueError, "optim", "step: bad lr ", lr);
  if (!std::isfinite(grad_scale))
    HP_THROW(ValueError, "optim", "step: bad grad_scale ", grad_scale);
  update(lr, grad_scale);
  for (const Hook& h : hooks_)
    if (h.after_step) h.after_step();
}

void Optimizer::add_hook(Hook hook) {
  hooks_.push_back(std::move(hook));
}

void Optimizer::update(double lr, double grad_scale) {
  if (!offload_) {
    std::vector<size_t> all(entries_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    step_entries(all, lr, grad_scale);
    return;
  }
  // Group by group: the next group's state is read while this one steps (offload.optimizer disk).
  const auto& groups = offload_->groups();
  int64_t grad_bytes = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    offload_->acquire(g, entries_);
    offload_->prefetch(g + 1, entries_);
    step_entries(groups[g], lr, grad_scale);
    offload_->release(g, entries_, /*dirty=*/true);
  }
  offload_->flush();
  for (const Entry& e : entries_)
    if (e.param.grad().defined()) grad_bytes += e.param.numel() * int64_t(sizeof(float));
  offload_->count_step(grad_bytes, grad_bytes);
}

void Optimizer::step_entries(const std::vector<size_t>& entry_ids, double lr, double grad_scale) {
  std::vector<size_t> adamw_ids, muon_ids;
  std::vector<Tensor> adamw_grads, muon_grads;
  for (size_t i : entry_ids) {
    Entry& e = entries_[i];
    Tensor g = e.param.grad();
    if (!g.defined()) continue;
    if (g.shape() != e.param.shape())
      HP_THROW(ValueError, "optim", e.fqn, ": gradient ", g.desc(), " does not match parameter ",
               e.param.desc());
    if (g.dtype() != DType::f32 || !g.is_contiguous()) g = g.to(DType::f32);
    const bool muon = e.algorithm == Algorithm::muon;
    (muon ? muon_ids : adamw_ids).push_back(i);
    (muon ? muon_grads : adamw_grads).push_back(g);
  }
  step_muon(muon_ids, muon_grads, lr, grad_scale);
  step_adamw(adamw_ids, adamw_grads, lr, grad_scale);
}

void Optimizer::step_adamw(const std::vector<size_t>& ids, const std::vector<Tensor>& grads,
                           double lr, double grad_scale) {
  // One parallel pass over fixed-size chunks of every parameter: many small tensors (norms,
  // biases) share the threads instead of each paying a parallel_for.
  constexpr int64_t kChunk = 1 << 14;
  struct Chunk {
    size_t k;  // index into ids
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  std::vector<AdamWStep> scalars;
  const AdamWOptions& o = options_.adamw;
  for (size_t k = 0; k < ids.size(); ++k) {
    Entry& e = entries_[ids[k]];
    if (!e.exp_avg.defined()) {
      const MemCategoryScope as_optimizer(MemCategory::optimizer);
      e.exp_avg = zeros(e.param.shape(), DType::f32, state_tier());
      e.exp_avg_sq = zeros(e.param.shape(), DType::f32, state_tier());
    }
    ++e.step;
    scalars.push_back(adamw_scalars(lr * e.lr_scale, o.beta1, o.beta2, o.eps, e.weight_decay,
                                    e.step, grad_scale));
    const int64_t n = e.param.numel();
    for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({k, b, std::min(n, b + kChunk)});
  }
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const Chunk& ch = chunks[static_cast<size_t>(c)];
      Entry& e = entries_[ids[ch.k]];
      adamw_update(e.param.data<float>() + ch.begin, grads[ch.k].data<float>() + ch.begin,
                   e.exp_avg.data<float>() + ch.begin, e.exp_avg_sq.data<float>() + ch.begin,
                   ch.end - ch.begin, scalars[ch.k]);
    }
  });
}

void Optimizer::step_muon(const std::vector<size_t>& ids, const std::vector<Tensor>& grads,
                          double lr, double grad_scale) {
  // Momentum, then every Newton–Schulz at once (sharded matrices share their exchanges), then the
  // updates. u and ortho have each parameter's local shape.
  const MuonOptions& o = options_.muon;
  const float mu = static_cast<float>(o.momentum), scale = static_cast<float>(grad_scale);
  constexpr int64_t kGrain = 1 << 14;
  std::vector<std::vector<float>> u(ids.size()), ortho(ids.size());
  std::vector<OrthoTask> tasks;
  for (size_t k = 0; k < ids.size(); ++k) {
    Entry& e = entries_[ids[k]];
    if (!e.momentum_buffer.defined()) {
      const MemCategoryScope as_optimizer(MemCategory::optimizer);
      e.momentum_buffer = zeros(e.param.shape(), DType::f32, state_tier());
    }
    ++e.step;
    const int64_t n = e.param.numel();
    u[k].resize(static_cast<size_t>(n));
    ortho[k].resize(static_cast<size_t>(n));
    const float* g = grads[k].data<float>();
    float* buf = e.momentum_buffer.data<float>();
    float* uk = u[k].data();
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float gi = g[i] * scale;
        buf[i] = mu * buf[i] + gi;
        uk[i] = o.nesterov ? gi + mu * buf[i] : buf[i];
      }
    });
    tasks.push_back({&e, u[k].data(), ortho[k].data()});
  }
  orthogonalize(tasks, muon_split_comms_, o.ns_steps);
  for (size_t k = 0; k < ids.size(); ++k) {
    Entry& e = entries_[ids[k]];
    const Shape& shape = e.shard ? e.shard->global_shape : e.param.shape();
    const int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const double elr = lr * e.lr_scale;
    const float decay = static_cast<float>(1.0 - elr * e.weight_decay);
    const float alpha = static_cast<float>(elr * muon_update_scale(o.update_scale, rows, cols));
    float* p = e.param.data<float>();
    const float* ok = ortho[k].data();
    parallel_for(0, e.param.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) p[i] = p[i] * decay - alpha * ok[i];
    });
  }
}

}  // namespace hp::optim
