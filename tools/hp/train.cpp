// hp train CONFIG.yaml [--set key=value ...] [--resume auto|PATH | --overwrite] [--profile]
// Exit status: 0 done, 128 + N stopped by signal N after saving (130 SIGINT, 143 SIGTERM), 2 bad
// usage or input, 3 the run diverged.
#include <cstdio>

#include "commands.h"
#include "hp/train/config.h"
#include "hp/train/trainer.h"

namespace hp::cli {

int run_train(const Args& args_in) {
  Args args = args_in;
  reject_unknown_flags(args, {"--set", "--resume", "--stop-after"},
                       {"--overwrite", "--allow-config-change", "--profile"});
  std::vector<std::string> sets;
  std::string value;
  while (take_value(args, "--set", &value)) sets.push_back(value);
  train::TrainOptions opt;
  take_value(args, "--resume", &opt.resume);
  opt.overwrite = take_flag(args, "--overwrite");
  if (opt.overwrite && !opt.resume.empty())
    throw UsageError{"--overwrite starts a fresh run: it cannot be combined with --resume"};
  opt.allow_config_change = take_flag(args, "--allow-config-change");
  opt.profile = take_flag(args, "--profile");
  if (take_value(args, "--stop-after", &value))
    opt.stop_after = parse_int("--stop-after", value, 1, 1LL << 40);
  if (args.size() != 1)
    throw UsageError{
        "expected one CONFIG.yaml (usage: hp train CONFIG.yaml [--set key=value ...] "
        "[--resume auto|PATH] [--stop-after N] [--overwrite] [--allow-config-change] "
        "[--profile])"};
  const train::Config cfg = train::load_config(args.front(), sets);
  try {
    // The run log and run.dir hold the results; a stop by signal exits as the shell expects.
    const train::TrainResult res = train::train(cfg, opt);
    if (res.stop_signal != 0) return 128 + res.stop_signal;
  } catch (const train::TrainingDiverged& e) {
    // Not bad input: the run itself failed (its last good checkpoint is kept). Exit 3.
    std::fprintf(stderr, "hp train: %s\n", e.what());
    return 3;
  }
  return 0;
}

}  // namespace hp::cli
