// `hp` reports user errors as user errors (exit 2, one line naming what is wrong): an unknown flag
// by name (with a did-you-mean), an unwritable run.dir by its path rather than as an internal
// error, and a token id as written with its line and position.
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
      {"train cfg.yaml --reseum auto", "hp train: unknown flag '--reseum' (did you mean --resume?)"},
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

}  // namespace
}  // namespace hp::cli
