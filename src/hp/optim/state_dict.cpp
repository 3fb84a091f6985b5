// Optimizer::state_dict / load_state_dict: state as named tensors "state.<fqn>.<name>"
// (docs/ARCHITECTURE.md §4 DCP layout), so checkpoints store optimizer state exactly like
// parameters.
#include <map>

#include "hp/optim/optimizer.h"
#include "hp/optim/state_offload.h"

namespace hp::optim {

namespace {
const char* const kAdamWNames[] = {"exp_avg", "exp_avg_sq"};
const char* const kMuonNames[] = {"momentum_buffer"};
}  // namespace

std::vector<NamedTensor> Optimizer::state_dict() const {
  if (!offload_) {
    std::vector<NamedTensor> out;
    for (const auto& e : entries_) append_state(e, /*copy=*/true, &out);
    return out;
  }
  // Group by group, as a step streams it (disk: read back without being written; the tensors
  // read are handed out, not copied, since the optimizer drops them). Reading moves state between
  // tiers but not its values, so this stays a const view of the optimizer.
  auto& self = const_cast<Optimizer&>(*this);
  const bool copy = offload_->placement() != StatePlacement::disk;
  std::vector<std::vector<NamedTensor>> by_entry(entries_.size());
  const auto& groups = offload_->groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    offload_->acquire(g, self.entries_);
    offload_->prefetch(g + 1, self.entries_);
    for (size_t i : groups[g]) append_state(entries_[i], copy, &by_entry[i]);
    offload_->release(g, self.entries_, /*dirty=*/false);
  }
  std::vector<NamedTensor> out;  // in entry order, as without offload
  for (auto& named : by_entry)
    for (auto& nt : named) out.push_back(std::move(nt));
  return out;
}

void Optimizer::append_state(const Entry& e, bool copy, std::vector<NamedTensor>* out) const {
  if (e.step == 0) return;
  const MemCategoryScope as_optimizer(MemCategory::optimizer);
  // Copies stay in the state's tier (a checkpoint of offloaded state must not need the device).
  auto take = [&](const Tensor& t) {
    if (!copy) return t;
    Tensor c = empty(t.shape(), DType::f32, state_tier());
    c.copy_from(t);
    return c;
  };
  const std::string pre = "state." + e.fqn + ".";
  out->emplace_back(pre + "step", from_vector({static_cast<double>(e.step)}, {}, DType::i64));
  if (e.algorithm == Algorithm::muon) {
    out->emplace_back(pre + "momentum_buffer", take(e.momentum_buffer));
  } else {
    out->emplace_back(pre + "exp_avg", take(e.exp_avg));
    out->emplace_back(pre + "exp_avg_sq", take(e.exp_avg_sq));
  }
}

void Optimizer::load_state_dict(const std::vector<NamedTensor>& state) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < entries_.size(); ++i) index[entries_[i].fqn] = i;
  // Staged per parameter, committed only when every key checks out.
  std::map<size_t, std::map<std::string, Tensor>> staged;
  for (const auto& [key, t] : state) {
    const size_t dot = key.rfind('.');
    if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot <= 6)
      HP_THROW(ValueError, "optim", "load_state_dict: key '", key,
               "' is not of the form state.<fqn>.<name>");
    const std::string fqn = key.substr(6, dot - 6), name = key.substr(dot + 1);
    auto it = index.find(fqn);
    if (it == index.end())
      HP_THROW(ValueError, "optim", "load_state_dict: ", key, ": no parameter named '", fqn, "'");
    const Entry& e = entries_[it->second];
    if (name == "step") {
      if (t.numel() != 1 || t.item() < 1)
        HP_THROW(ValueError, "optim", "load_state_dict: ", key,
                 ": expected one positive step count, got ", t.desc());
    } else {
      bool known = false;
      if (e.algorithm == Algorithm::muon)
        for (const char* n : kMuonNames) known |= name == n;
      else
        for (const char* n : kAdamWNames) known |= name == n;
      if (!known)
        HP_THROW(ValueError, "optim", "load_state_dict: ", key, ": no state '", name, "' for ",
                 algorithm_name(e.algorithm), " parameter ", fqn);
      if (t.shape() != e.param.shape())
        HP_THROW(ValueError, "optim", "load_state_dict: ", key, ": shape ", t.desc(),
                 " does not match parameter ", e.param.desc());
    }
    if (!staged[it->second].emplace(name, t).second)
      HP_THROW(ValueError, "optim", "load_state_dict: duplicate key ", key);
  }
  for (const auto& [i, named] : staged) {
    const Entry& e = entries_[i];
    const size_t want = e.algorithm == Algorithm::muon ? 2 : 3;
    if (named.size() != want || !named.count("step"))
      HP_THROW(ValueError, "optim", "load_state_dict: state.", e.fqn, ": incomplete (",
               named.size(), " of ", want, " entries: step plus the ", algorithm_name(e.algorithm),
               " buffers)");
  }
  for (auto& e : entries_) {
    e.step = 0;
    e.exp_avg = e.exp_avg_sq = e.momentum_buffer = Tensor();
  }
  // Copies in the state's tier, so the optimizer never aliases the caller's tensors.
  const MemCategoryScope as_optimizer(MemCategory::optimizer);
  auto copy = [&](const Tensor& t) {
    Tensor c = empty(t.shape(), DType::f32, state_tier());
    c.copy_from(t);
    return c;
  };
  for (auto& [i, named] : staged) {
    Entry& e = entries_[i];
    e.step = static_cast<int64_t>(named.at("step").item());
    if (e.algorithm == Algorithm::muon) {
      e.momentum_buffer = copy(named.at("momentum_buffer"));
    } else {
      e.exp_avg = copy(named.at("exp_avg"));
      e.exp_avg_sq = copy(named.at("exp_avg_sq"));
    }
  }
  if (offload_) {
    // disk: everything goes to the file (host: it stays where it is).
    for (size_t g = 0; g < offload_->groups().size(); ++g)
      offload_->release(g, entries_, /*dirty=*/true);
    offload_->flush();
  }
}

}  // namespace hp::optim
