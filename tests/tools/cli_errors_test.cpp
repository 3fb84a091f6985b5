// `hp` reports user errors as user errors (exit 2, one line naming what is wrong): an unknown flag
// by name (with a did-you-mean), an unwritable run.dir by its path rather than as an internal
// error, a token id as written with its line and position, and a bad config key once (one error
// per key, once per job under hp launch).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "has.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_hp;

using test::has;

const std::string kQwen3 = std::string(HP_TEST_DIR) + "/../models/fixtures/qwen3";

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
    dir_ = fs::temp_directory_path() / ("hp_cli_errors_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CliErrors, UnknownFlagIsNamedFirst) {
  // Before: "--model DIR is required", the misspelt flag unnamed.
  auto r = run_hp("forward --reseum auto --model " + kQwen3);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "hp forward: unknown flag '--reseum'")) << r.output;
  r = run_hp("generate --model " + kQwen3 + " --prompt hi --gredy");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "unknown flag '--gredy' (did you mean --greedy?)")) << r.output;
  r = run_hp("generate --model " + kQwen3 + " --prompt hi --max-new-token=3");
  EXPECT_TRUE(has(r.output, "unknown flag '--max-new-token' (did you mean --max-new-tokens?)"))
      << r.output;
  r = run_hp("model info " + kQwen3 + " --json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "hp model: unknown flag '--json'")) << r.output;
  // A value that starts with '-' is a value, not a flag.
  r = run_hp("generate --model " + kQwen3 + " --prompt -hello --max-new-tokens 1 --bogus");
  EXPECT_TRUE(has(r.output, "unknown flag '--bogus'")) << r.output;
  // Every command names it: train, ckpt, config, bench, launch, mx.
  const std::pair<std::string, std::string> cases[] = {
      {"train cfg.yaml --reseum auto",
       "hp train: unknown flag '--reseum' (did you mean --resume?)"},
      {"ckpt export-hf a b --overwrit", "unknown flag '--overwrit' (did you mean --overwrite?)"},
      {"config show c.yaml --sett a=1", "unknown flag '--sett' (did you mean --set?)"},
      {"bench train c.yaml --step 2", "unknown flag '--step' (did you mean --steps?)"},
      {"launch -n 2 --host a -- true", "unknown flag '--host' (did you mean --hosts?)"},
      {"mx quantize --inn x", "unknown flag '--inn' (did you mean --in?)"}};
  for (const auto& [cmd, want] : cases) {
    r = run_hp(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.output;
    EXPECT_TRUE(has(r.output, want)) << cmd << ": " << r.output;
  }
}

TEST_F(CliErrors, RunDirThatCannotBeCreatedIsAUserErrorNamingThePath) {
  std::ofstream(dir_ / "corpus.txt") << std::string(4000, 'a');
  std::ofstream(dir_ / "file") << "not a directory\n";
  const fs::path run = dir_ / "file" / "run";
  std::ofstream(dir_ / "tiny.yaml") << "model: {arch: llama, hidden: 32, layers: 1, heads: 2, "
                                       "kv_heads: 1, intermediate: 64}\n"
                                    << "data: {path: " << (dir_ / "corpus.txt").string() << "}\n"
                                    << "training: {steps: 2, batch_size: 2, seq_len: 16}\n"
                                    << "metrics: {progress: none}\n"
                                    << "run: {dir: " << run.string() << "}\n";
  const auto r = run_hp("train " + (dir_ / "tiny.yaml").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(has(r.output, "internal error")) << r.output;
  EXPECT_TRUE(has(r.output, run.string())) << r.output;
}

TEST_F(CliErrors, TokenIdsAreReportedAsWrittenWithTheirPosition) {
  std::ofstream(dir_ / "huge.txt") << "1 2\n3 99999999999999999999999\n";
  auto r = run_hp("forward --model " + kQwen3 + " --tokens " + (dir_ / "huge.txt").string() +
                  " --out " + (dir_ / "o.f32").string());
  EXPECT_EQ(r.code, 2) << r.output;
  // Before: strtoll saturated it to 9223372036854775807.
  EXPECT_TRUE(has(r.output, "huge.txt:2: bad token id '99999999999999999999999' (position 1)"))
      << r.output;
  EXPECT_FALSE(has(r.output, "9223372036854775807")) << r.output;
  std::ofstream(dir_ / "vocab.txt") << "1 2\n\n3 4 100\n";
  r = run_hp("forward --model " + kQwen3 + " --tokens " + (dir_ / "vocab.txt").string() +
             " --out " + (dir_ / "o.f32").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "vocab.txt:3: token id 100 (position 2) is outside the vocabulary"))
      << r.output;
}

// How many times `part` occurs in `text`.
size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A 1-layer model config on a small corpus (extra: more YAML lines).
std::string tiny_config(const fs::path& dir, const std::string& model, const std::string& extra) {
  std::ofstream(dir / "corpus.txt") << std::string(4000, 'a');
  const fs::path file = dir / "tiny.yaml";
  std::ofstream(file) << "model: " << model << "\n"
                      << "data: {path: " << (dir / "corpus.txt").string() << "}\n"
                      << "lr_scheduler: {name: cosine, warmup_steps: 2}\n"
                      << "training: {steps: 2, batch_size: 2, seq_len: 16, sample_tokens: 0}\n"
                      << "metrics: {progress: none}\n"
                      << "run: {dir: " << (dir / "run").string() << "}\n"
                      << extra;
  return file.string();
}

const char* kTinyLlama =
    "{arch: llama, hidden: 32, layers: 1, heads: 2, kv_heads: 1, intermediate: 64}";

// Under `hp launch -n 2` every rank reads the same bad config: the error is printed once (rank 0),
// not once per rank (before: twice).
TEST_F(CliErrors, ConfigErrorsPrintOnceUnderLaunch) {
  const std::string cfg = tiny_config(dir_, kTinyLlama, "");
  const std::pair<std::string, std::string> cases[] = {
      {"optimizer.lr=-1", "optimizer.lr: must be > 0, got -1"},
      {"model.hidden=-64", "model.hidden: must be >= 0, got -64"},
      {"memory.device_budget=abc", "memory.device_budget: bad size 'abc'"}};
  for (const auto& [set, want] : cases) {
    const auto r =
        run_hp("launch -n 2 -- " + test::hp_binary() + " train " + cfg + " --set " + set);
    EXPECT_NE(r.code, 0) << set << ": " << r.output;
    EXPECT_EQ(count_of(r.output, want), 1u) << set << ": " << r.output;
  }
}

// One error per bad key: a negative size is not also "must be >= 1 with model.arch" (before: both
// bounds), and a negative training.steps does not add a warm-up error against it.
TEST_F(CliErrors, ABadKeyGivesOneError) {
  const std::string cfg = tiny_config(dir_, kTinyLlama, "");
  auto r = run_hp("train " + cfg + " --set model.hidden=-64");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_of(r.output, "model.hidden: must be >= 0, got -64"), 1u) << r.output;
  EXPECT_EQ(count_of(r.output, "model.hidden:"), 1u) << r.output;
  r = run_hp("train " + cfg + " --set training.steps=-5");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_of(r.output, "training.steps: must be >= 1, got -5"), 1u) << r.output;
  EXPECT_FALSE(has(r.output, "warmup_steps")) << r.output;
  // A zero size still gets the arch's own bound.
  r = run_hp("train " + cfg + " --set model.hidden=0");
  EXPECT_EQ(count_of(r.output, "model.hidden: must be >= 1 with model.arch, got 0"), 1u)
      << r.output;
}

// A device budget below one layer's step is refused by the documented plan check, not by the
// allocator while the plan measures (before: "[alloc] device tier over budget").
TEST_F(CliErrors, TinyDeviceBudgetIsRefusedByThePlanCheck) {
  const std::string cfg = tiny_config(dir_, kTinyLlama, "");
  const auto r = run_hp("train " + cfg + " --set memory.device_budget=1KiB");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_of(r.output,
                     "[memory] memory.device_budget = 1.00 KiB cannot hold even one "
                     "layer's step"),
            1u)
      << r.output;
  EXPECT_FALSE(has(r.output, "[alloc]")) << r.output;
}

// parallel.moe.groups above the expert slots per rank runs one group per slot, and the log says
// so with the effective count (before: "99 expert groups").
TEST_F(CliErrors, MoEGroupsAboveTheSlotsLogTheEffectiveCount) {
  const std::string cfg = tiny_config(
      dir_,
      "{arch: qwen3_moe, hidden: 32, layers: 1, heads: 2, kv_heads: 1, intermediate: 64, "
      "experts: 4, experts_per_token: 2, moe_intermediate: 32}",
      "parallel: {ep: 2, moe: {kernel: megamoe, groups: 99}}\n");
  const auto r = run_hp("launch -n 2 -- " + test::hp_binary() + " train " + cfg);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "on MegaMoE (2 expert groups: parallel.moe.groups 99 exceeds the 2 "
                  "expert slots per rank)"))
      << r.output;
  EXPECT_FALSE(has(r.output, "99 expert groups")) << r.output;
}

}  // namespace
}  // namespace hp::cli
