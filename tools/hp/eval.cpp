// hp eval CONFIG.yaml --resume auto|PATH [--set key=value ...]: the validation loss and perplexity
// of a checkpoint on the config's eval section (train/evaluate.h), on any rank count under
// `hp launch`: builds the run as `hp train` does (build_run), loads the checkpoint --resume names
// (resolve_resume: a step or run directory, or auto), runs one pass and prints it (rank 0).
// Exit status: 0 done, 2 bad usage or input.
#include <iostream>

#include "commands.h"
#include "hp/core/error.h"
#include "hp/fsdp/fsdp.h"
#include "hp/train/config.h"
#include "hp/train/evaluate.h"
#include "hp/train/layout.h"
#include "hp/train/setup.h"
#include "hp/train/state.h"
#include "hp/train/step.h"

namespace hp::cli {

namespace {

// ValueError("[eval] ...") naming `config_file` when the config has no eval section, or when
// there is no checkpoint. Collective.
train::EvalResult evaluate_checkpoint(const train::Config& cfg, const std::string& config_file,
                                      const std::string& resume, std::ostream& log) {
  if (!cfg.eval.enabled())
    HP_THROW(ValueError, "eval", config_file,
             ": eval.data or eval.split is required: hp eval evaluates on the config's eval "
             "section");
  auto world = dist::world();
  const train::Layout layout = train::parallel_layout(cfg, world);
  train::RunSetup run = train::build_run(cfg, layout);
  train::Evaluator evaluator(cfg, run.data.eval, layout, run.documents);
  std::ostream* rank_log = world->rank() == 0 ? &log : nullptr;
  const std::string dir = train::resolve_resume(resume, cfg.run.dir, rank_log);
  if (dir.empty())
    HP_THROW(ValueError, "eval", "--resume ", resume, ": no checkpoint in run.dir ", cfg.run.dir,
             " (from ", config_file, ")");
  train::check_resume_config(dir, cfg, /*allow_change=*/false, rank_log);
  const int64_t step = train::restore(dir, run.par, *run.opt, *run.loader);
  run.par.fsdp->reshard();  // the forward gathers the loaded masters
  if (rank_log)
    *rank_log << "evaluating " << dir << " (step " << step << ")\n"
              << evaluator.describe(run.data.eval_name) << "\n";
  const std::unique_ptr<train::TrainStep> step_loss = train::make_step(run, layout, cfg, *world);
  const train::EvalResult r = evaluator.run(*step_loss, *run.par.fsdp, step);
  if (rank_log) *rank_log << train::Evaluator::format(r) << "\n";
  return r;
}

}  // namespace

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
  evaluate_checkpoint(cfg, args.front(), resume, std::cout);
  return 0;
}

}  // namespace hp::cli
