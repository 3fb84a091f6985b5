// hp memory plan CONFIG.yaml [--set key=value ...]: the bytes a run will hold per memory tier
// (parameters, gradients, optimizer state, activations) under its offload policy, whether they fit
// memory.device_budget, and the largest micro-batch / seq_len that would (train/memory_plan.h).
// Nothing is trained and no data is read; the activations come from a short measurement on the
// model at 2-3 layers. Exit status: 0 fits, 1 does not fit, 2 bad usage or input.
#include <cstdio>

#include "commands.h"
#include "hp/dist/communicator.h"
#include "hp/train/config.h"
#include "hp/train/memory_plan.h"

namespace hp::cli {

int run_memory(const Args& args_in) {
  Args args = args_in;
  if (args.empty() || args.front() != "plan")
    throw UsageError{"usage: hp memory plan CONFIG.yaml [--set key=value ...]"};
  args.erase(args.begin());
  reject_unknown_flags(args, {"--set"});
  std::vector<std::string> sets;
  std::string value;
  while (take_value(args, "--set", &value)) sets.push_back(value);
  if (args.size() != 1)
    throw UsageError{"expected one CONFIG.yaml (usage: hp memory plan CONFIG.yaml [--set k=v])"};
  const train::Config cfg = train::load_config(args.front(), sets);
  const train::MemoryPlan plan = train::plan_memory(cfg);
  if (dist::world()->rank() == 0)  // under hp launch every rank plans its own share alike
    std::printf(
        "hp memory plan %s (offload: params %s, grads %s, optimizer %s, activations "
        "%s)\n%s",
        args.front().c_str(), enum_name(cfg.offload.params).c_str(),
        enum_name(cfg.offload.grads).c_str(),
        enum_name(cfg.offload.optimizer).c_str(),
        enum_name(cfg.offload.activations).c_str(), plan.to_text().c_str());
  return plan.fits() ? 0 : 1;
}

}  // namespace hp::cli
