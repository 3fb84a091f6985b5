// hp eval CONFIG.yaml --resume auto|PATH [--set key=value ...]: the validation loss and perplexity
// of a checkpoint on the config's eval section (train/evaluate.h), on any rank count under
// `hp launch`. Exit status: 0 done, 2 bad usage or input.
#include <iostream>

#include "commands.h"
#include "hp/train/config.h"
#include "hp/train/evaluate.h"

namespace hp::cli {

int run_eval(const Args& args_in) {
  Args args = args_in;
  reject_unknown_flags(args, {"--set", "--resume"});
  std::vector<std::string> sets;
  std::string value, resume;
  while (take_value(args, "--set", &value)) sets.push_back(value);
  take_value(args, "--resume", &resume);
  if (args.size() != 1 || resume.empty())
    throw UsageError{
        "expected one CONFIG.yaml and --resume (usage: hp eval CONFIG.yaml --resume auto|PATH "
        "[--set key=value ...])"};
  const train::Config cfg = train::load_config(args.front(), sets);
  train::evaluate_checkpoint(cfg, args.front(), resume, std::cout);
  return 0;
}

}  // namespace hp::cli
