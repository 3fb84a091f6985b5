// Optimizer::state_dict / load_state_dict: state as named tensors "state.<fqn>.<name>"
// (docs/ARCHITECTURE.md §4 DCP layout), so checkpoints store optimizer state exactly like
// parameters.
#include <map>

#include "hp/optim/optimizer.h"

namespace hp::optim {

namespace {
const char* const kAdamWNames[] = {"exp_avg", "exp_avg_sq"};
const char* const kMuonNames[] = {"momentum_buffer"};
}  // namespace

std::vector<NamedTensor> Optimizer::state_dict() const {
  std::vector<NamedTensor> out;
  for (const auto& e : entries_) {
    if (e.step == 0) continue;
    const std::string pre = "state." + e.fqn + ".";
    out.emplace_back(pre + "step", from_vector({static_cast<double>(e.step)}, {}, DType::i64));
    if (e.algorithm == Algorithm::muon) {
      out.emplace_back(pre + "momentum_buffer", e.momentum_buffer.clone());
    } else {
      out.emplace_back(pre + "exp_avg", e.exp_avg.clone());
      out.emplace_back(pre + "exp_avg_sq", e.exp_avg_sq.clone());
    }
  }
  return out;
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
  for (auto& [i, named] : staged) {
    Entry& e = entries_[i];
    e.step = static_cast<int64_t>(named.at("step").item());
    // to() makes contiguous f32 copies, so the optimizer never aliases the caller's tensors.
    if (e.algorithm == Algorithm::muon) {
      e.momentum_buffer = named.at("momentum_buffer").to(DType::f32);
    } else {
      e.exp_avg = named.at("exp_avg").to(DType::f32);
      e.exp_avg_sq = named.at("exp_avg_sq").to(DType::f32);
    }
  }
}

}  // namespace hp::optim
