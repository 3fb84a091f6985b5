#include "hp/mx/convert.h"

#include "hp/core/error.h"
#include "hp/mx/linear.h"

namespace hp::mx {
namespace {

// What convert_to_mx changes: a Linear, or an expert set (experts FQN, the block).
struct Target {
  std::string fqn;
  nn::Linear* linear = nullptr;
  nn::GroupedExperts* experts = nullptr;
};

bool has_prefix(const std::string& s, const std::string& prefix) {
  return s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 &&
         s[prefix.size()] == '.';
}

}  // namespace

std::vector<std::string> convert_to_mx(nn::Module& root, const ConvertSpec& spec) {
  std::vector<bool> used(spec.modules.size(), false);
  // Marks every `modules` glob matching one of names; true when one does and no exclude does.
  auto selected = [&](std::initializer_list<std::string> names) {
    bool hit = false;
    for (size_t i = 0; i < spec.modules.size(); ++i)
      for (const std::string& n : names)
        if (nn::glob_match(spec.modules[i], n)) used[i] = hit = true;
    for (const std::string& ex : spec.exclude)
      for (const std::string& n : names)
        if (nn::glob_match(ex, n)) return false;
    return hit;
  };
  // Resolve everything before changing anything, so a bad spec leaves the model as it was.
  std::vector<Target> todo;
  std::string skip_below;  // the experts FQN of the last expert set: its Linears are not called
  for (auto& [fqn, m] : root.named_modules()) {
    if (!skip_below.empty() && has_prefix(fqn, skip_below)) continue;
    if (auto* g = dynamic_cast<nn::GroupedExperts*>(m)) {
      const std::string experts = (fqn.empty() ? "" : fqn + ".") + g->experts_child();
      skip_below = experts;
      if (selected({fqn, experts})) todo.push_back({experts, nullptr, g});
    } else if (auto* lin = dynamic_cast<nn::Linear*>(m)) {
      if (selected({fqn})) todo.push_back({fqn, lin, nullptr});
    }
  }
  for (size_t i = 0; i < spec.modules.size(); ++i)
    if (!used[i])
      HP_THROW(ValueError, "mx", "low-precision module glob '", spec.modules[i],
               "' matches no linear module or MoE expert set (expert linears convert as a set: "
               "match '<layer>.mlp' or '<layer>.mlp.experts')");
  const QuantSpec q = spec.quant;
  std::vector<std::string> out;
  for (const Target& t : todo) {
    if (t.linear)
      t.linear->set_kernel(
          [q](const Tensor& x, const Tensor& w, const Tensor& b) { return mx_linear(x, w, b, q); });
    else
      t.experts->set_grouped_kernel(MxGroupedKernel{q});
    out.push_back(t.fqn);
  }
  return out;
}

}  // namespace hp::mx
