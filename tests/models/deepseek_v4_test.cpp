// DeepSeek-V4 (models/deepseek_v4.h) against transformers' DeepseekV4ForCausalLM: logits, loss and
// gradients of tiny random checkpoints (tests/models/fixtures/deepseek_v4_*, made by
// tools/make_v4_fixtures.py), export and reload, and the config errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "error_of.h"
#include "hp/io/safetensors.h"
#include "hp/models/deepseek_v4.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "hp/ops/ops.h"
#include "models/compare.h"
#include "test_dir.h"

namespace hp::models {
namespace {

namespace fs = std::filesystem;
using hp::testing::error_of;
using testing::max_abs_diff;
using testing::rel_diff;

std::string fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/" + name;
}

Tensor load_ref(const io::SafetensorsFile& f, const std::string& name) {
  const auto& t = f.tensor(name);
  return from_blob(const_cast<std::byte*>(t.data), t.shape, t.dtype, nullptr).clone();
}

// checkpoint name → parameter, by the architecture's name map.
std::map<std::string, Tensor> by_checkpoint_name(const CausalLM& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [fqn, p] : m.named_parameters()) out[deepseek_v4_checkpoint_name(fqn)] = p;
  return out;
}

class V4Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(V4Parity, LogitsLossAndGradientsMatchTransformers) {
  const std::string dir = fixture(GetParam());
  auto model = load_model(dir);
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const Tensor ids = load_ref(ref, "ids");

  const Tensor logits = model->forward(ids);
  EXPECT_LE(max_abs_diff(logits, load_ref(ref, "logits")), 1e-4) << GetParam();

  const Tensor loss = model->loss(ids);
  EXPECT_NEAR(loss.item(), load_ref(ref, "loss").item(), 1e-5);
  loss.backward();
  const auto params = by_checkpoint_name(*model);
  int checked = 0;
  for (const auto& t : ref.tensors()) {
    if (t.name.rfind("grad.", 0) != 0) continue;
    const std::string name = t.name.substr(5);
    ASSERT_TRUE(params.count(name)) << name;
    const Tensor g = params.at(name).grad();
    ASSERT_TRUE(g.defined()) << name;
    EXPECT_LE(rel_diff(g, load_ref(ref, t.name)), 1e-4) << GetParam() << " " << name;
    ++checked;
  }
  EXPECT_GE(checked, 60);
}

// Layer by layer: the residual streams of batch row 0 after each layer (the last entry is the
// final norm's output, as transformers' hidden_states), so a mismatch names its layer type.
TEST_P(V4Parity, StreamsMatchAfterEveryLayer) {
  const std::string dir = fixture(GetParam());
  auto model = load_model(dir);
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const Tensor ids = load_ref(ref, "ids");
  const int64_t n = model->config().num_hidden_layers;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor h = i + 1 < n ? model->run_layers(ids, 0, i + 1) : model->hidden_states(ids);
    EXPECT_LE(max_abs_diff(contiguous(select(h, 0, 0)), load_ref(ref, "streams." + std::to_string(i))),
              1e-4)
        << GetParam() << " layer " << i << " (" << model->config().layer_types.at(size_t(i)) << ", "
        << model->config().mlp_layer_types.at(size_t(i)) << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Parity,
                         ::testing::Values("deepseek_v4_hc2", "deepseek_v4_hc4"));

TEST(DeepseekV4, ConfigReadsEveryLayerType) {
  const ModelConfig c = read_model_config(fixture("deepseek_v4_hc2"));
  EXPECT_EQ(c.hc_mult, 2);
  EXPECT_EQ(c.layer_types.at(0), kSlidingAttention);
  EXPECT_EQ(c.layer_types.at(1), kCompressedSparseAttention);
  EXPECT_EQ(c.layer_types.at(2), kHeavilyCompressedAttention);
  EXPECT_EQ(c.mlp_layer_types.at(0), "hash_moe");
  EXPECT_EQ(c.mlp_layer_types.at(3), "moe");
  EXPECT_EQ(c.compress_rate_hca, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.intermediate_size, c.moe_intermediate_size);
}

TEST(DeepseekV4, CheckpointNames) {
  EXPECT_EQ(deepseek_v4_checkpoint_name("lm_head.weight"), "head.weight");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.1.self_attn.compressor.indexer.q_b_proj.weight"),
            "model.layers.1.attn.indexer.wq_b.weight");
  EXPECT_EQ(deepseek_v4_checkpoint_name(
                "model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight"),
            "model.layers.1.attn.indexer.weights_proj.weight");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.1.self_attn.compressor.indexer.gate_proj.weight"),
            "model.layers.1.attn.indexer.compressor.wgate.weight");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.1.self_attn.compressor.position_bias"),
            "model.layers.1.attn.compressor.ape");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.0.attn_hc.fn"), "model.layers.0.hc_attn_fn");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.0.mlp.experts.3.up_proj.weight"),
            "model.layers.0.ffn.experts.3.w3.weight");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.0.mlp.shared_experts.down_proj.weight"),
            "model.layers.0.ffn.shared_experts.w2.weight");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.2.mlp.gate.e_score_correction_bias"),
            "model.layers.2.ffn.gate.bias");
  EXPECT_EQ(deepseek_v4_checkpoint_name("model.layers.2.post_attention_layernorm.weight"),
            "model.layers.2.ffn_norm.weight");
}

// A copy of the hc2 fixture's config.json with `edit` applied to its text, in a per-process dir.
std::string edited_config(const std::string& tag, const std::string& from, const std::string& to) {
  const fs::path dir = fs::temp_directory_path() /
                       ("hp_v4_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ifstream in(fixture("deepseek_v4_hc2") + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  std::ofstream(dir / "config.json") << text;
  return dir.string();
}

TEST(DeepseekV4, BadConfigValuesNameFileKeyAndValue) {
  const std::string unknown_layer =
      edited_config("layer", "\"heavily_compressed_attention\",", "\"dense_attention\",");
  std::string e = error_of([&] { read_model_config(unknown_layer); });
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("layer_types[2]"), std::string::npos) << e;
  EXPECT_NE(e.find("dense_attention"), std::string::npos) << e;

  const std::string short_list = edited_config("short", "\"sliding_attention\",", "");
  e = error_of([&] { read_model_config(short_list); });
  EXPECT_NE(e.find("layer_types: has 3 entries but num_hidden_layers is 4"), std::string::npos)
      << e;

  const std::string mlp = edited_config("mlp", "\"hash_moe\",\n    \"hash_moe\"",
                                        "\"hash_moe\",\n    \"dense\"");
  e = error_of([&] { read_model_config(mlp); });
  EXPECT_NE(e.find("mlp_layer_types[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("'dense'"), std::string::npos) << e;

  const std::string router = edited_config("router", "\"sqrtsoftplus\"", "\"relu\"");
  e = error_of([&] { read_model_config(router); });
  EXPECT_NE(e.find("scoring_func"), std::string::npos) << e;
  EXPECT_NE(e.find("'relu'"), std::string::npos) << e;
  for (const auto& d : {unknown_layer, short_list, mlp, router}) fs::remove_all(d);
}

TEST(DeepseekV4, MissingHashTableIsNamed) {
  const fs::path dir =
      fs::temp_directory_path() / ("hp_v4_nohash_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fixture("deepseek_v4_hc2") + "/config.json", dir / "config.json");
  const auto ckpt = io::SafetensorsFile::open(fixture("deepseek_v4_hc2") + "/model.safetensors");
  std::vector<io::SafetensorsEntry> entries;
  for (const auto& t : ckpt.tensors())
    if (t.name != "model.layers.1.ffn.gate.tid2eid")
      entries.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
  io::write_safetensors((dir / "model.safetensors").string(), entries, {{"format", "pt"}});
  const std::string e = error_of([&] { load_model(dir.string()); });
  EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
  EXPECT_NE(e.find("missing tensor 'model.layers.1.ffn.gate.tid2eid'"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(DeepseekV4, ExportReloadsEqual) {
  auto model = load_model(fixture("deepseek_v4_hc4"));
  const fs::path dir =
      fs::temp_directory_path() / ("hp_v4_export_" + std::to_string(::getpid()));
  save_pretrained(*model, dir.string());
  auto again = load_model(dir.string());
  const auto ref = io::SafetensorsFile::open(fixture("deepseek_v4_hc4") + "/reference.safetensors");
  const Tensor ids = load_ref(ref, "ids");
  EXPECT_EQ(max_abs_diff(model->forward(ids), again->forward(ids)), 0.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hp::models
