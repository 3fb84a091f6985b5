// `hp eval` at the command line: the validation pass over a saved checkpoint prints the run's last
// validation line, and a config without an eval section or a run.dir without a checkpoint is a
// user error (exit 2) naming the config file and key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "has.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_hp;

using test::has;

class EvalCli : public test::CliTest {
 protected:
  EvalCli() : CliTest("hp_eval_cli_") {}
  void SetUp() override {
    CliTest::SetUp();
    std::ofstream corpus(dir_ / "corpus.txt"), other(dir_ / "other.txt");
    for (int i = 0; i < 200; ++i) {
      corpus << "the quick brown fox " << i << " jumps over the lazy dog.\n";
      other << "a lazy dog " << i << " sleeps under the quick brown fox.\n";
    }
  }
  // A tiny run's config; `eval` is its eval section ("" = none).
  std::string config(const std::string& name, const std::string& eval) {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, "
                        "intermediate: 64}\n"
                     << "data: {path: " << (dir_ / "corpus.txt").string() << "}\n"
                     << "training: {steps: 2, batch_size: 4, seq_len: 32, mixed_precision: f32}\n"
                     << "metrics: {log_every: 1, progress: lines}\n"
                     << (eval.empty() ? "" : "eval: " + eval + "\n")
                     << "run: {dir: " << (dir_ / name).string() << "}\n";
    return p.string();
  }
};

TEST_F(EvalCli, RepeatsTheRunsLastValidation) {
  const std::string cfg = config("run", "{data: " + (dir_ / "other.txt").string() + ", steps: 2, batch_size: 2}");
  const auto train = run_hp("train " + cfg);
  ASSERT_EQ(train.code, 0) << train.output;
  const size_t at = train.output.find("eval step 2: loss");
  ASSERT_NE(at, std::string::npos) << train.output;
  const std::string line = train.output.substr(at, train.output.find("  (", at) - at);
  const auto eval = run_hp("eval " + cfg + " --resume auto");
  EXPECT_EQ(eval.code, 0) << eval.output;
  EXPECT_TRUE(has(eval.output, "evaluating ")) << eval.output;
  EXPECT_TRUE(has(eval.output, line)) << line << "\n" << eval.output;
}

TEST_F(EvalCli, NamesTheMissingSectionOrCheckpoint) {
  const std::string no_eval = config("noeval", "");
  auto r = run_hp("eval " + no_eval + " --resume auto");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "[eval] " + no_eval + ": eval.data or eval.split is required"))
      << r.output;
  r = run_hp("eval " + config("nockpt", "{data: " + (dir_ / "other.txt").string() + "}") + " --resume auto");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "[eval] --resume auto: no checkpoint in run.dir")) << r.output;
}

}  // namespace
}  // namespace hp::cli
