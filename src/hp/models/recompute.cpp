#include "hp/models/recompute.h"

#include <algorithm>
#include <map>

#include "hp/autograd/checkpoint.h"
#include "hp/core/error.h"

namespace hp::models {

std::span<const EnumName<RecomputeMode>> enum_names(RecomputeMode) {
  using enum RecomputeMode;
  static constexpr EnumName<RecomputeMode> names[] = {
      {"none", none}, {"full", full}, {"selective", selective}};
  return names;
}

void install_recompute(const SelectedBlock& r) {
  FeedForward* side = r.side;
  r.module->add_forward_wrapper([side](const Tensor& x, const nn::Module::ForwardFn& inner) {
    // The region keeps its own copy of inner (owning what it captures) to run it in backward.
    autograd::RegionFn fn = [inner = nn::Module::ForwardFn(inner),
                             side](const std::vector<Tensor>& in) {
      std::vector<Tensor> out{inner(in[0])};
      if (side)
        for (const Tensor& t : side->side_outputs()) out.push_back(t);
      return out;
    };
    std::vector<Tensor> outs = autograd::checkpoint(fn, {x});
    if (outs.size() > 1) side->set_side_outputs({outs.begin() + 1, outs.end()});
    return outs[0];
  });
}

namespace {

std::string block_names(const DecoderLayer& layer) {
  std::string s;
  for (const auto& [name, child] : layer.children()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

std::vector<SelectedBlock> select_blocks(CausalLM& model, int64_t every_k_layers,
                                        const std::vector<std::string>& modules,
                                        const char* component) {
  if (every_k_layers < 1)
    HP_THROW(ValueError, component, "every_k_layers must be >= 1, got ", every_k_layers);
  std::map<const nn::Module*, std::string> fqn_of;
  for (auto& [fqn, m] : model.named_modules()) fqn_of[m] = fqn;
  std::vector<bool> used(modules.size(), false);
  std::vector<SelectedBlock> todo;
  const auto& layers = model.model->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (static_cast<int64_t>(i) % every_k_layers != 0) continue;
    if (!layers[i]) continue;  // on another pipeline stage
    DecoderLayer& layer = *layers[i];
    const std::string& fqn = fqn_of.at(&layer);
    if (modules.empty()) {
      todo.push_back({fqn, &layer, layer.mlp.get()});
      continue;
    }
    for (const auto& [name, child] : layer.children()) {
      bool hit = false;
      for (size_t g = 0; g < modules.size(); ++g)
        if (nn::glob_match(modules[g], name)) used[g] = hit = true;
      if (hit)
        todo.push_back({fqn + "." + name, child.get(), dynamic_cast<FeedForward*>(child.get())});
    }
  }
  const auto held = std::find_if(layers.begin(), layers.end(), [](const auto& l) { return l; });
  for (size_t g = 0; g < modules.size(); ++g)
    if (!used[g])
      HP_THROW(ValueError, component, "modules glob '", modules[g],
               "' matches no block of the selected layers (blocks: ",
               held == layers.end() ? std::string("none") : block_names(**held), ")");
  return todo;
}

std::vector<std::string> apply_recompute(CausalLM& model, const RecomputeSpec& spec) {
  if (spec.every_k_layers < 1)
    HP_THROW(ValueError, "recompute", "every_k_layers must be >= 1, got ", spec.every_k_layers);
  if (!spec.modules.empty() && spec.mode != RecomputeMode::selective)
    HP_THROW(ValueError, "recompute", "modules (", spec.modules.front(),
             ", ...) apply to mode selective only, mode is '", enum_name(spec.mode), "'");
  if (spec.mode == RecomputeMode::none) return {};
  const bool full = spec.mode == RecomputeMode::full;
  std::vector<std::string> out;
  for (const SelectedBlock& r :
       select_blocks(model, full ? 1 : spec.every_k_layers, spec.modules, "recompute")) {
    install_recompute(r);
    out.push_back(r.fqn);
  }
  return out;
}

}  // namespace hp::models
