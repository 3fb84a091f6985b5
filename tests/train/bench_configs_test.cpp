// configs/bench_*.yaml (`hp bench train`): they load, have the sizes and shapes the performance
// targets name, and never spend bench time on checkpoints.
#include <gtest/gtest.h>

#include <filesystem>

#include "hp/models/hf/config.h"
#include "hp/train/config.h"
#include "hp/train/options.h"
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

// configs/deepseek_v4.yaml builds a DeepSeek-V4 from sizes: at 4 layers, DeepseekV4Config's
// default layer kinds include both compressed attentions and both MoE routings.
TEST(BundledConfigs, DeepSeekV4FromSizes) {
  const Config c = load_config(kRepo + "/configs/deepseek_v4.yaml");
  EXPECT_EQ(c.model.arch, "deepseek_v4");
  const models::ModelConfig m = arch_model_config(c.model, 257, c.training.seq_len, 256);
  EXPECT_EQ(m.architecture, "DeepseekV4ForCausalLM");
  EXPECT_EQ(m.num_key_value_heads, 1);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.layer_types, (std::vector<std::string>{
                               "heavily_compressed_attention", "heavily_compressed_attention",
                               "heavily_compressed_attention", "compressed_sparse_attention"}));
  EXPECT_EQ(m.mlp_layer_types,
            (std::vector<std::string>{"hash_moe", "hash_moe", "hash_moe", "moe"}));
}

}  // namespace
}  // namespace hp::train
