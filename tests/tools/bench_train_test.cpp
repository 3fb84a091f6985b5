// `hp bench train`: usage errors, the spec handed to the peer, the warm-up and timing rule both
// sides follow, and the figures reported beside the peer's. Trains a tiny model for 10+ steps; the
// peer's Python is tests/tools/fixtures/fake_peer_python.sh (fixed tokens/s), so the test needs no
// torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "hp/io/json.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::run_hp;

// llama, hidden 32, 1 layer, 2 heads / 1 kv head (head_dim 16), intermediate 64, vocab 300,
// untied: 2·300·32 + (32·32·2 + 32·16·2 + 3·32·64 + 2·32) + 32.
constexpr int64_t kTinyParams = 28512;

io::Json read_json(const fs::path& p) {
  return io::read_json_file(p.string());
}

class BenchTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
    dir_ = fs::temp_directory_path() / ("hp_bench_train_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    {
      std::ofstream corpus(dir_ / "corpus.txt");
      for (int i = 0; i < 200; ++i) corpus << "In the beginning was the word, line " << i << ".\n";
    }
    std::ofstream(dir_ / "tiny.yaml") << "model: {arch: llama, hidden: 32, layers: 1, heads: 2, "
                                         "kv_heads: 1, intermediate: 64, vocab: 300}\n"
                                      << "data: {path: " << (dir_ / "corpus.txt").string() << "}\n"
                                      << "optimizer: {lr: 0.002, betas: [0.8, 0.9], eps: 1.0e-7, "
                                         "weight_decay: 0.05}\n"
                                      << "training: {steps: 3, batch_size: 2, seq_len: 16}\n"
                                      << "metrics: {peak_tflops: 1.0, progress: none, jsonl: false}\n"
                                      << "run: {dir: " << run_dir().string() << "}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path run_dir() const { return dir_ / "run"; }
  fs::path json() const { return dir_ / "out.json"; }
  // hp bench train on the tiny config with `env` before the command and `flags` after it.
  test::CliResult bench(const std::string& env, const std::string& flags) const {
    return run_command(env + " " + test::hp_binary() + " bench train " +
                       (dir_ / "tiny.yaml").string() + " --json " + json().string() + " " + flags);
  }
  static std::string fake_python() {
    return std::string("HP_PEER_PYTHON=") + HP_TEST_DIR + "/fixtures/fake_peer_python.sh";
  }

  fs::path dir_;
};

TEST_F(BenchTrain, UsageErrorsExitTwoBeforeTraining) {
  const std::pair<const char*, const char*> cases[] = {
      {"bench", "expected 'train"},
      {"bench forward", "expected 'train"},
      {"bench train --steps 0", "--steps expects an integer"},
      {"bench train --peer-dtype f16", "--peer-dtype expects bf16, f32 or both, got 'f16'"},
      {"bench train --steps 4", "--steps expects an integer in [5,"},
      {"bench train --max-warmup 4", "--max-warmup expects an integer in [5,"},
      {"bench train --peer-steps 6", "unknown flag '--peer-steps'"},
      {"bench train --no-peer --peer-dtype f32", "--no-peer excludes"},
      {"bench train a.yaml b.yaml", "unexpected argument 'b.yaml'"},
  };
  for (auto [args, message] : cases) {
    const auto r = run_hp(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }
  const auto missing = run_hp("bench train " + (dir_ / "missing.yaml").string());
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("missing.yaml"), std::string::npos) << missing.output;
}

TEST_F(BenchTrain, ConfigsThePeerCannotMirrorFailBeforeTraining) {
  const auto muon = bench(fake_python(), "--set optimizer.name=muon");
  EXPECT_EQ(muon.code, 2) << muon.output;
  EXPECT_NE(muon.output.find("[bench] optimizer.name = 'muon'"), std::string::npos) << muon.output;
  const auto vocab = bench(fake_python(), "--set model.vocab=0 --set data.format=tokens_u16");
  EXPECT_EQ(vocab.code, 2) << vocab.output;
  EXPECT_NE(vocab.output.find("[bench] model.vocab = 0"), std::string::npos) << vocab.output;
  EXPECT_FALSE(fs::exists(run_dir())) << "trained although the peer config was refused";
}

TEST_F(BenchTrain, PeerGetsTheSameModelShapesAndOptimizer) {
  const auto r = bench(fake_python() + " FAKE_PEER_PARAMS=" + std::to_string(kTinyParams),
                       "--peer-dtype both");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* dtype : {"bf16", "f32"}) {
    const auto spec = read_json(run_dir() / (std::string("peer_spec_") + dtype + ".json"));
    const auto& c = spec.at("config");
    EXPECT_EQ(c.at("architectures").at(0).as_string(), "LlamaForCausalLM");
    EXPECT_EQ(c.at("model_type").as_string(), "llama");
    EXPECT_EQ(c.at("hidden_size").as_int(), 32);
    EXPECT_EQ(c.at("num_hidden_layers").as_int(), 1);
    EXPECT_EQ(c.at("num_attention_heads").as_int(), 2);
    EXPECT_EQ(c.at("num_key_value_heads").as_int(), 1);
    EXPECT_EQ(c.at("head_dim").as_int(), 16);
    EXPECT_EQ(c.at("intermediate_size").as_int(), 64);
    EXPECT_EQ(c.at("vocab_size").as_int(), 300);
    EXPECT_EQ(c.at("tie_word_embeddings").as_bool(), false);
    EXPECT_EQ(spec.at("seq_len").as_int(), 16);
    EXPECT_EQ(spec.at("batch_size").as_int(), 2);
    EXPECT_EQ(spec.at("grad_accum").as_int(), 1);
    // The rule hp times itself with (train/step_timer.h).
    EXPECT_EQ(spec.at("timed_steps").as_int(), 5);
    EXPECT_EQ(spec.at("warmup").at("min_steps").as_int(), 5);
    EXPECT_EQ(spec.at("warmup").at("window").as_int(), 3);
    EXPECT_DOUBLE_EQ(spec.at("warmup").at("tolerance").as_double(), 0.10);
    EXPECT_EQ(spec.at("warmup").at("max_steps").as_int(), 30);
    EXPECT_DOUBLE_EQ(spec.at("lr").as_double(), 0.002);
    EXPECT_DOUBLE_EQ(spec.at("betas").at(0).as_double(), 0.8);
    EXPECT_DOUBLE_EQ(spec.at("betas").at(1).as_double(), 0.9);
    EXPECT_DOUBLE_EQ(spec.at("eps").as_double(), 1e-7);
    EXPECT_DOUBLE_EQ(spec.at("weight_decay").as_double(), 0.05);
    EXPECT_DOUBLE_EQ(spec.at("grad_clip").as_double(), 1.0);
    EXPECT_GE(spec.at("threads").as_int(), 1);
    EXPECT_EQ(spec.at("dtype").as_string(), dtype);
  }
  const auto out = read_json(json());
  EXPECT_EQ(out.at("num_parameters").as_int(), kTinyParams);
  EXPECT_EQ(out.at("tokens_per_step").as_int(), 32);
  const double ours = out.at("hp").at("tokens_per_s").as_double();
  ASSERT_GT(ours, 0);
  // Ours: at least 5 warm-up steps, then 5 timed ones; tokens/s from their median.
  const auto& hp = out.at("hp");
  EXPECT_EQ(hp.at("step_s").size(), 5u);
  EXPECT_GE(hp.at("warmup_s").size(), 5u);
  EXPECT_LE(hp.at("warmup_s").size(), 30u);
  std::vector<double> timed = hp.at("step_s").as_double_list();
  std::sort(timed.begin(), timed.end());
  EXPECT_DOUBLE_EQ(hp.at("median_step_s").as_double(), timed[2]);
  EXPECT_DOUBLE_EQ(ours, 32.0 / timed[2]);
  EXPECT_EQ(out.at("timing").at("statistic").as_string(), "median");
  ASSERT_EQ(out.at("peers").size(), 2u);
  const double want[] = {1000, 2000};  // fake_peer_python.sh: bf16, f32
  for (int i = 0; i < 2; ++i) {
    const auto& p = out.at("peers").at(i);
    EXPECT_EQ(p.at("dtype").as_string(), i == 0 ? "bf16" : "f32");
    EXPECT_TRUE(p.at("ran").as_bool());
    EXPECT_DOUBLE_EQ(p.at("tokens_per_s").as_double(), want[i]);
    EXPECT_EQ(p.at("warmup_s").size(), 5u);
    EXPECT_TRUE(p.at("stable").as_bool());
    EXPECT_DOUBLE_EQ(p.at("ratio").as_double(), ours / want[i]);
    // Same FLOPs per token on both sides, against the same peak (1.0 TFLOP/s in the config).
    const double hp_tflops = out.at("hp").at("tflops").as_double();
    EXPECT_NEAR(p.at("tflops").as_double(), hp_tflops * want[i] / ours, 1e-12);
    EXPECT_NEAR(p.at("mfu").as_double(), p.at("tflops").as_double(), 1e-12);
  }
  EXPECT_NE(r.output.find("PyTorch eager, bf16 autocast"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PyTorch eager, f32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MFU against metrics.peak_tflops = 1.000 TFLOP/s"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("then times 5 steps; figures are from the median timed step"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("WARNING"), std::string::npos) << r.output;
}

TEST_F(BenchTrain, PeerDtypeDefaultsToOursAndParameterMismatchWarns) {
  const auto r = bench(fake_python() + " FAKE_PEER_PARAMS=7",
                       "--set training.mixed_precision=f32 --set training.grad_accum=2 "
                       "--steps 6 --max-warmup 7");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto spec = read_json(run_dir() / "peer_spec_f32.json");
  EXPECT_EQ(spec.at("dtype").as_string(), "f32");
  EXPECT_EQ(spec.at("grad_accum").as_int(), 2);
  EXPECT_EQ(spec.at("timed_steps").as_int(), 6);
  EXPECT_EQ(spec.at("warmup").at("max_steps").as_int(), 7);
  EXPECT_FALSE(fs::exists(run_dir() / "peer_spec_bf16.json"));
  EXPECT_NE(r.output.find("WARNING: the f32 peer has 7 parameters, hp " +
                          std::to_string(kTinyParams)),
            std::string::npos)
      << r.output;
}

TEST_F(BenchTrain, MissingTorchSkipsThePeer) {
  const auto r = bench("HP_PEER_PYTHON=" + (dir_ / "no_such_python").string(), "");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped: '" + (dir_ / "no_such_python").string() +
                          "' cannot import torch and transformers"),
            std::string::npos)
      << r.output;
  const auto out = read_json(json());
  ASSERT_EQ(out.at("peers").size(), 1u);
  EXPECT_FALSE(out.at("peers").at(0).at("ran").as_bool());
  EXPECT_GT(out.at("hp").at("tokens_per_s").as_double(), 0);
}

TEST_F(BenchTrain, FailingPeerFailsTheBench) {
  const auto r = bench(fake_python() + " FAKE_PEER_FAIL=1", "");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("peer exited with status 5"), std::string::npos) << r.output;
}

TEST_F(BenchTrain, NoPeerAndStepsOverride) {
  // training.steps (3 in the config) does not cut the timing short: the bench runs as many steps
  // as its rule needs, at most --max-warmup + --steps.
  const auto r = bench(fake_python(), "--no-peer --steps 6 --max-warmup 5");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("PyTorch"), std::string::npos) << r.output;
  const auto out = read_json(json());
  EXPECT_EQ(out.at("peers").size(), 0u);
  EXPECT_EQ(out.at("hp").at("step_s").size(), 6u);
  EXPECT_EQ(out.at("hp").at("warmup_s").size(), 5u);
  EXPECT_FALSE(fs::exists(run_dir() / "peer_spec_bf16.json"));
  // The bench never saves checkpoints (they would be timed with the steps).
  for (const auto& e : fs::directory_iterator(run_dir()))
    EXPECT_NE(e.path().filename().string().rfind("step-", 0), 0u) << e.path();
}

}  // namespace
}  // namespace hp::cli
