// `hp ckpt export-hf` into a directory that already holds an export, and what `hp forward` /
// `hp generate` then serve from it (a byte-level run's too); `hp forward` failing leaves no logits
// file. Two random tiny
// Llama models are saved as DCP checkpoints the way the trainer saves them (weights plus
// config.json, tokenizer.json and config.yaml beside them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "hp/autograd/grad_mode.h"
#include "hp/checkpoint/dcp.h"
#include "hp/core/random.h"
#include "hp/io/tokenizer.h"
#include "hp/models/hf/config.h"
#include "hp/models/hf/registry.h"
#include "hp/ops/ops.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::run_hp;

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> read_floats(const fs::path& p) {
  const std::string bytes = read(p);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

class ExportForward : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
    dir_ = fs::temp_directory_path() / ("hp_export_forward_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tokenizer_ = std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/qwen2.tokenizer.json";
    config_ = models::read_model_config(std::string(HP_TEST_DIR) + "/../models/fixtures/llama");
    config_.vocab_size = io::Tokenizer::from_file(tokenizer_).vocab_size();
    std::ofstream(dir_ / "tokens.txt") << "1 2 3 4 5 6\n7 8 9\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A random model (by `seed`) saved as the checkpoint of run `name`; returns the model.
  std::shared_ptr<models::CausalLM> save_run(const std::string& name, uint64_t seed) {
    manual_seed(seed);
    auto model = models::build_model(config_);
    std::vector<checkpoint::Chunk> chunks;
    for (const auto& [fqn, t] : model->named_parameters())
      chunks.push_back({fqn, t, t.shape(), std::vector<int64_t>(t.shape().size(), 0)});
    checkpoint::SaveOptions opt;
    opt.extra_files = {{"config.json", models::model_config_to_json(config_)},
                       {"config.yaml", "model: {arch: llama}\n"},
                       {"tokenizer.json", read(tokenizer_)}};
    checkpoint::save((dir_ / name).string(), 1, chunks, "{}", nullptr, opt);
    return model;
  }

  // The logits `model` gives the sequences of tokens.txt, as `hp forward` writes them.
  static std::vector<float> logits_of(models::CausalLM& model) {
    autograd::NoGradGuard no_grad;
    std::vector<float> out;
    for (const std::vector<double>& s :
         {std::vector<double>{1, 2, 3, 4, 5, 6}, std::vector<double>{7, 8, 9}}) {
      const Tensor l =
          model.forward(from_vector(s, {1, static_cast<int64_t>(s.size())}, DType::i64))
              .contiguous();
      const auto* p = static_cast<const float*>(l.raw_data());
      out.insert(out.end(), p, p + l.numel());
    }
    return out;
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Names in the test dir that an export or hp forward left behind (staging / temp files).
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".partial") != std::string::npos ||
          e.path().filename().string().find(".old-") != std::string::npos)
        out.push_back(e.path().filename().string());
    return out;
  }

  fs::path dir_;
  std::string tokenizer_;
  models::ModelConfig config_;
};

// A run on byte-level text (no tokenizer anywhere) exports with its vocabulary as tokenizer.json,
// which `hp generate --model OUT` loads (before: "has no tokenizer.json").
TEST_F(ExportForward, ByteLevelRunExportsATokenizerGenerateLoads) {
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += "In the beginning God created the heaven and the earth. ";
  std::ofstream(dir_ / "corpus.txt") << corpus;
  std::ofstream(dir_ / "run.yaml")
      << "model: {arch: qwen3, hidden: 32, layers: 1, heads: 2, kv_heads: 1, intermediate: 64}\n"
      << "data: {path: " << path("corpus.txt") << "}\n"
      << "training: {steps: 2, batch_size: 2, seq_len: 16, sample_tokens: 0}\n"
      << "metrics: {progress: none}\nrun: {dir: " << path("run") << "}\n";
  auto r = run_hp("train " + path("run.yaml"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_hp("ckpt export-hf " + path("run") + " " + path("out"));
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(fs::exists(dir_ / "out" / "tokenizer.json"));
  EXPECT_EQ(io::Tokenizer::from_file(path("out")).encode("In é", false),
            (std::vector<int32_t>{73, 110, 32, 195, 169}));
  r = run_hp("generate --model " + path("out") + " --prompt 'In the' --max-new-tokens 4 --greedy");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("In the", 0), 0u) << r.output;
}

TEST_F(ExportForward, ReExportServesTheNewWeightsOnlyWithOverwrite) {
  auto a = save_run("run_a", 1);
  auto b = save_run("run_b", 2);
  const std::string out = path("hf");

  auto r = run_hp("ckpt export-hf " + path("run_a") + " " + out + " --max-shard-bytes 1");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json"));

  // Without --overwrite: refused (exit 2, one line naming OUT), and OUT still serves run A.
  r = run_hp("ckpt export-hf " + path("run_b") + " " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(out + ": directory is not empty"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;

  // With --overwrite OUT is replaced whole: run B's single-file export, no stale index or shards.
  r = run_hp("ckpt export-hf " + path("run_b") + " " + out + " --overwrite");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out + "/model-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/config.yaml"));
  EXPECT_EQ(read(out + "/tokenizer.json"), read(tokenizer_));
  EXPECT_EQ(leftovers(), std::vector<std::string>{});

  r = run_hp("forward --model " + out + " --tokens " + path("tokens.txt") + " --out " +
             path("logits.f32"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto got = read_floats(path("logits.f32"));
  const auto want_b = logits_of(*b), not_a = logits_of(*a);
  ASSERT_EQ(got.size(), want_b.size());
  EXPECT_LE(max_abs_diff(got, want_b), 1e-5);
  EXPECT_GT(max_abs_diff(got, not_a), 1e-3);  // the two models do differ

  // The tokenizer came along: hp generate works on the export.
  r = run_hp("generate --model " + out + " --prompt 'Hello' --max-new-tokens 3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("Hello", 0), 0u) << r.output;
}

// hp forward writes to a temp file and renames it at the end: a run that fails while writing
// (here: a file size limit of 0, with SIGXFSZ ignored so the write just fails) leaves no output
// file, and an older one of the same name as it was.
TEST_F(ExportForward, FailedForwardLeavesNoOutputFile) {
  save_run("run", 1);
  const std::string model = path("hf"), out = path("logits.f32");
  auto r = run_hp("ckpt export-hf " + path("run") + " " + model);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string forward = "ulimit -f 0; trap '' XFSZ; " + test::hp_binary() +
                              " forward --model " + model + " --tokens " + path("tokens.txt") +
                              " --out " + out;
  r = run_command(forward);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(out), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(leftovers(), std::vector<std::string>{});

  { std::ofstream(out) << "older logits"; }
  r = run_command(forward);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(read(out), "older logits");
  EXPECT_EQ(leftovers(), std::vector<std::string>{});
}

}  // namespace
}  // namespace hp::cli
