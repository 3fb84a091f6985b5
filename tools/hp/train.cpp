// hp train CONFIG.yaml [--set key=value ...] [--resume auto|PATH]
#include "commands.h"
#include "hp/train/config.h"
#include "hp/train/trainer.h"

namespace hp::cli {

int run_train(const Args& args_in) {
  Args args = args_in;
  std::vector<std::string> sets;
  std::string value;
  while (take_value(args, "--set", &value)) sets.push_back(value);
  train::TrainOptions opt;
  take_value(args, "--resume", &opt.resume);
  if (take_value(args, "--stop-after", &value))
    opt.stop_after = parse_int("--stop-after", value, 1, 1LL << 40);
  if (args.size() != 1)
    throw UsageError{
        "expected one CONFIG.yaml (usage: hp train CONFIG.yaml [--set key=value ...] "
        "[--resume auto|PATH])"};
  const train::Config cfg = train::load_config(args.front(), sets);
  train::train(cfg, opt);  // the run log and run.dir hold the results
  return 0;
}

}  // namespace hp::cli
