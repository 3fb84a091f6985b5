// configs/bench_*.yaml (`hp bench train`): they load, have the sizes and shapes the performance
// targets name, and never spend bench time on checkpoints.
#include <gtest/gtest.h>

#include <filesystem>

#include "hp/train/config.h"
#include "test_dir.h"

namespace hp::train {
namespace {

const std::string kRepo = std::string(HP_TEST_DIR) + "/../..";

// Parameters of a dense Llama-style model (no biases) as the trainer builds it from model.*.
int64_t llama_parameters(const ModelSection& m) {
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : m.hidden / m.heads;
  const int64_t attention = m.hidden * head_dim * (2 * m.heads + 2 * m.kv_heads);
  const int64_t layer = attention + 3 * m.hidden * m.intermediate + 2 * m.hidden;
  return m.vocab * m.hidden * (m.tie_embeddings ? 1 : 2) + m.layers * layer + m.hidden;
}

void expect_bench_settings(const Config& c) {
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.optimizer.name, OptimizerName::adamw);
  EXPECT_EQ(c.training.mixed_precision, MixedPrecision::bf16);
  EXPECT_EQ(c.checkpoint.interval, 0);
  EXPECT_FALSE(c.checkpoint.save_final);
  EXPECT_EQ(c.metrics.peak_tflops, 0) << "MFU must be against the measured GEMM peak";
  // data.path is relative to the repository root, where the bench is run from.
  EXPECT_TRUE(std::filesystem::exists(kRepo + "/" + c.data.path)) << c.data.path;
  EXPECT_GT(c.training.steps, 1) << "step 1 is warm-up and not timed";
}

TEST(BenchConfigs, FiveMillionParameterLlama) {
  const Config c = load_config(kRepo + "/configs/bench_5m.yaml");
  expect_bench_settings(c);
  EXPECT_EQ(llama_parameters(c.model), 5261568);
  EXPECT_EQ(c.training.seq_len, 256);
  EXPECT_EQ(c.training.batch_size, 8);
  EXPECT_GE(c.model.vocab, 257) << "byte-level ids must fit";
}

TEST(BenchConfigs, HundredMillionParameterDense) {
  const Config c = load_config(kRepo + "/configs/bench_100m.yaml");
  expect_bench_settings(c);
  EXPECT_EQ(llama_parameters(c.model), 109529856);  // the count the yaml's comment derives
  EXPECT_EQ(c.model.experts, 0);
}

// Every bundled config loads (the README and docs point users at them) and reads existing data.
TEST(BundledConfigs, EveryConfigLoads) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kRepo + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    Config c = load_config(e.path().string());
    EXPECT_TRUE(std::filesystem::exists(kRepo + "/" + c.data.path))
        << e.path() << ": " << c.data.path;
    ++n;
  }
  EXPECT_GE(n, 5);
}

}  // namespace
}  // namespace hp::train
