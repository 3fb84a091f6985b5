// hp config schema | hp config show CONFIG.yaml [--set key=value ...]
#include "hp/train/config.h"

#include <cstdio>

#include "commands.h"

namespace hp::cli {

int run_config(const Args& args_in) {
  Args args = args_in;
  if (args.empty())
    throw UsageError{"expected 'schema' or 'show CONFIG.yaml [--set key=value ...]'"};
  const std::string sub = args.front();
  args.erase(args.begin());
  reject_unknown_flags(args, {"--set"});
  if (sub == "schema") {
    reject_leftovers(args);
    std::fputs(train::schema_text().c_str(), stdout);
    return 0;
  }
  if (sub != "show") throw UsageError{"unknown subcommand '" + sub + "' (expected schema|show)"};
  std::vector<std::string> sets;
  std::string value;
  while (take_value(args, "--set", &value)) sets.push_back(value);
  if (args.size() != 1) throw UsageError{"show expects one CONFIG.yaml"};
  const train::Config cfg = train::load_config(args.front(), sets);
  for (const auto& note : cfg.notes.lines) std::fprintf(stderr, "%s\n", note.c_str());
  std::fputs(train::to_yaml(cfg).c_str(), stdout);
  return 0;
}

}  // namespace hp::cli
