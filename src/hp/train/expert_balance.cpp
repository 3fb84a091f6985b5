#include "hp/train/expert_balance.h"

#include <algorithm>
#include <memory>

#include "hp/core/error.h"
#include "hp/models/moe.h"
#include "hp/models/transformer.h"

namespace hp::train {

ExpertBiasBalancer::ExpertBiasBalancer(models::CausalLM& model, const Parallelized& par,
                                       const Layout& layout, double rate)
    : layout_(layout), rate_(rate) {
  if (rate <= 0) return;
  for (auto& [fqn, m] : model.named_modules()) {
    const auto* moe = dynamic_cast<const models::MoEBlock*>(m);
    if (!moe || moe->options().router != models::RouterKind::sigmoid_group_topk) continue;
    // fqn: "model.layers.<i>.mlp".
    const std::string prefix = "model.layers.";
    HP_CHECK(fqn.rfind(prefix, 0) == 0, "MoE block ", fqn, " outside the decoder layers");
    Layer l{fqn + ".gate.e_score_correction_bias", std::stoll(fqn.substr(prefix.size())), moe,
            Tensor(), 0, std::vector<double>(size_t(moe->options().num_experts), 0.0)};
    for (const auto& [name, t] : par.params)
      if (name == l.fqn) {
        l.master = t.local();
        l.row0 = t.offsets().at(0);
      }
    HP_CHECK(l.master.defined());
    layers_.push_back(std::move(l));
  }
  // Under pp a stage may hold no MoE layer: the model has none when no rank holds one.
  const dist::CommPtr world = dist::world();
  const double held =
      world->size() == 1
          ? double(layers_.size())
          : world->all_reduce(from_data<double>({double(layers_.size())}, {1})).to_vector()[0];
  if (held == 0)
    HP_THROW(ValueError, "train", "model.router_bias_update_rate = ", rate,
             " needs MoE layers whose router has a correction bias (DeepSeek-V3's sigmoid "
             "group-limited routing); this model has none");
}

void ExpertBiasBalancer::clear() {
  for (Layer& l : layers_) std::fill(l.counts.begin(), l.counts.end(), 0.0);
}

void ExpertBiasBalancer::accumulate(int64_t begin, int64_t end) {
  if (!active()) return;
  for (Layer& l : layers_) {
    if (l.layer < begin || l.layer >= end) continue;
    const std::vector<int64_t>& c = l.block->last_expert_counts();
    for (size_t e = 0; e < c.size() && e < l.counts.size(); ++e) l.counts[e] += double(c[e]);
  }
}

void ExpertBiasBalancer::step() {
  if (!active()) return;
  // Every layer's counts in one vector, summed over the ranks that saw other tokens.
  std::vector<double> all;
  for (const Layer& l : layers_) all.insert(all.end(), l.counts.begin(), l.counts.end());
  Tensor sum = from_data<double>(all, {int64_t(all.size())});
  if (layout_.shard_comm && layout_.shard_comm->size() > 1)
    sum = layout_.shard_comm->all_reduce(sum, dist::ReduceOp::sum);
  if (layout_.replicate_comm) sum = layout_.replicate_comm->all_reduce(sum, dist::ReduceOp::sum);
  const std::vector<double> total = sum.to_vector();
  size_t at = 0;
  for (Layer& l : layers_) {
    const size_t n = l.counts.size();
    double mean = 0;
    for (size_t e = 0; e < n; ++e) mean += total[at + e];
    mean /= double(n);
    float* b = l.master.data<float>();
    for (int64_t r = 0; r < l.master.size(0); ++r) {
      const double load = total[at + size_t(l.row0 + r)];
      const double sign = load < mean ? 1.0 : load > mean ? -1.0 : 0.0;
      b[r] = static_cast<float>(double(b[r]) + rate_ * sign);
    }
    at += n;
  }
  clear();
}

std::vector<std::string> ExpertBiasBalancer::bias_fqns() const {
  std::vector<std::string> out;
  for (const Layer& l : layers_) out.push_back(l.fqn);
  return out;
}

std::function<void(int64_t, int64_t)> install_expert_balance(models::CausalLM& model, const Parallelized& par,
                                             const Layout& layout, double rate,
                                             optim::Optimizer& opt) {
  auto balancer = std::make_shared<ExpertBiasBalancer>(model, par, layout, rate);
  opt.add_hook({[balancer] { balancer->clear(); }, [balancer] { balancer->step(); }});
  return [balancer](int64_t begin, int64_t end) { balancer->accumulate(begin, end); };
}

}  // namespace hp::train
