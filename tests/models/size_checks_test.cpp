// Bad sizes in config.json: the ones no model can have (parameter count over int64, more than
// kMaxLayers layers) fail while parsing; the ones that disagree with the safetensors weights fail
// in load_model from the headers, naming config.json, the key and the value, before a model of that
// size is built. YaRN without a factor is an error, not silently no scaling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "error_of.h"
#include "has.h"
#include "hp/io/json.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "test_dir.h"

namespace hp::models {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

using test::has;

// Members set in a config.json.
using Patch = std::initializer_list<std::pair<std::string_view, io::JsonValue>>;

// A copy of fixture `name` (config.json + model.safetensors) whose config.json has `patch` merged.
// Per process: ctest runs each test as its own process, several at once.
std::string patched_fixture(const std::string& name, Patch patch) {
  const fs::path src = fs::path(HP_TEST_DIR) / "fixtures" / name;
  const fs::path dst = fs::path(::testing::TempDir()) /
                       ("hp_size_checks_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::create_directories(dst);
  fs::copy_file(src / "model.safetensors", dst / "model.safetensors");
  io::JsonValue j = io::parse_json_value(io::read_text_file((src / "config.json").string(), "test"),
                                         "config.json");
  for (const auto& [key, value] : patch) j[key] = value;
  std::ofstream(dst / "config.json") << j.dump(2);
  return dst.string();
}

std::string load_error(const std::string& name, Patch patch) {
  const std::string dir = patched_fixture(name, patch);
  const std::string e = error_of([&] { load_model(dir); });
  fs::remove_all(dir);
  return e;
}

TEST(SizeChecks, LayerCountIsCheckedAgainstTheWeightsBeforeBuilding) {
  EXPECT_EQ(load_error("qwen3", {}), "(no error)");
  std::string e = load_error("qwen3", {{"num_hidden_layers", 3}});
  ASSERT_TRUE(has(e, "config.json") && has(e, "num_hidden_layers = 3") &&
              has(e, "holds 2 layer(s)"))
      << e;
  // Before the header check this built the layers (10^12 of them until the OOM killer came; such
  // a count now fails while parsing, see below).
  e = load_error("qwen3", {{"num_hidden_layers", kMaxLayers}});
  EXPECT_TRUE(has(e, "num_hidden_layers = 65536") && has(e, "holds 2 layer(s)")) << e;
  e = load_error("qwen3", {{"num_hidden_layers", 1000000000000LL}});
  EXPECT_TRUE(has(e, "config.json: num_hidden_layers: 1000000000000 layers is more than the 65536"))
      << e;
}

// The experts' width: before these checks a wrong one allocated every expert at that width (here
// terabytes) before load_weights compared shapes.
TEST(SizeChecks, ExpertSizesAreCheckedAgainstTheWeightsBeforeBuilding) {
  EXPECT_EQ(load_error("qwen3_moe", {}), "(no error)");
  std::string e = load_error("qwen3_moe", {{"moe_intermediate_size", 100000000000LL}});
  EXPECT_TRUE(has(e, "config.json: moe_intermediate_size = 100000000000") &&
              has(e, ".mlp.experts.") && has(e, ".gate_proj.weight' has shape [16, 32]"))
      << e;
  e = load_error("deepseek_v3", {{"moe_intermediate_size", 17}});
  EXPECT_TRUE(has(e, "config.json: moe_intermediate_size") && has(e, "17") &&
              has(e, "has shape [16, 32]"))
      << e;
  e = load_error("deepseek_v3", {{"n_shared_experts", 1000000000}});
  EXPECT_TRUE(has(e, "moe_intermediate_size × n_shared_experts = 16 × 1000000000 = 16000000000") &&
              has(e, "mlp.shared_experts.gate_proj.weight"))
      << e;
  // Mixtral's experts are intermediate_size wide.
  e = load_error("mixtral", {{"intermediate_size", 100000000000LL}});
  EXPECT_TRUE(has(e, "config.json: intermediate_size = 100000000000") &&
              has(e, ".block_sparse_moe.experts.") && has(e, ".w1.weight' has shape [24, 32]"))
      << e;
}

TEST(SizeChecks, SizesAreCheckedAgainstTensorShapesNamingKeyAndTensor) {
  std::string e = load_error("qwen3", {{"intermediate_size", 72}});
  EXPECT_TRUE(has(e, "config.json: intermediate_size = 72") &&
              has(e, "model.layers.0.mlp.gate_proj.weight") && has(e, "[64, 32]"))
      << e;
  e = load_error("qwen3", {{"vocab_size", 128}});
  EXPECT_TRUE(has(e, "vocab_size = 128") && has(e, "has shape [96, 32]")) << e;
  e = load_error("qwen3", {{"num_attention_heads", 8}});
  EXPECT_TRUE(has(e, "num_attention_heads × head_dim = 8 × 16 = 128") &&
              has(e, "self_attn.q_proj.weight"))
      << e;
  e = load_error("qwen3", {{"num_key_value_heads", 4}});
  EXPECT_TRUE(has(e, "num_key_value_heads × head_dim = 4 × 16 = 64")) << e;
  e = load_error("mixtral", {{"num_local_experts", 6}});
  EXPECT_TRUE(has(e, "num_local_experts = 6") && has(e, "block_sparse_moe.gate.weight")) << e;
}

ModelConfig parse(const std::string& text) {
  return parse_model_config(io::parse_json(text, "cfg.json"));
}

std::string cfg(const std::string& extra) {
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
      "intermediate_size": 64, "num_attention_heads": 4, )" +
         extra + "}";
}

TEST(SizeChecks, SizesWhoseParameterCountOverflowsFailWhileParsing) {
  EXPECT_EQ(parse(cfg(R"("num_hidden_layers": 2)")).num_hidden_layers, 2);
  std::string e = error_of([] {
    parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 4611686018427387904,
        "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
        "num_hidden_layers": 2})");
  });
  EXPECT_TRUE(has(e, "cfg.json: vocab_size: 4611686018427387904") && has(e, "overflow int64")) << e;
  e = error_of([] { parse(cfg(R"("num_hidden_layers": 4611686018427387904)")); });
  EXPECT_TRUE(has(e, "cfg.json: num_hidden_layers: 4611686018427387904 layers")) << e;
  e = error_of([] {
    parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
        "intermediate_size": 4611686018427387904, "num_attention_heads": 4,
        "num_hidden_layers": 2})");
  });
  EXPECT_TRUE(has(e, "cfg.json: intermediate_size:")) << e;
  // A count that fits int64 but no model has: building (or counting) it layer by layer never ends.
  e = error_of([] { parse(cfg(R"("num_hidden_layers": 1000000000000)")); });
  EXPECT_TRUE(has(e, "cfg.json: num_hidden_layers: 1000000000000 layers is more than the 65536"))
      << e;
  EXPECT_EQ(parse(cfg(R"("num_hidden_layers": 65536)")).num_hidden_layers, 65536);
  // moe_intermediate_size, when given, is a size like the others.
  for (const char* bad : {"0", "-3"}) {
    e = error_of([&] {
      parse(cfg(R"("num_hidden_layers": 2, "moe_intermediate_size": )" + std::string(bad)));
    });
    EXPECT_TRUE(has(e, "cfg.json: moe_intermediate_size: must be > 0, got " + std::string(bad)))
        << e;
  }
  EXPECT_EQ(
      parse(cfg(R"("num_hidden_layers": 2, "moe_intermediate_size": null)")).moe_intermediate_size,
      0);
}

TEST(SizeChecks, YarnNeedsAFactor) {
  // No factor and no original context: "scaling" by 1, silently, before the check.
  std::string e = error_of(
      [] { parse(cfg(R"("num_hidden_layers": 2, "rope_scaling": {"rope_type": "yarn"})")); });
  EXPECT_TRUE(has(e, "cfg.json: rope_scaling.factor: missing")) << e;
  e = error_of([] {
    parse(cfg(R"("num_hidden_layers": 2, "rope_parameters": {"rope_type": "yarn",
        "rope_theta": 10000})"));
  });
  EXPECT_TRUE(has(e, "cfg.json: rope_parameters.factor: missing")) << e;
  // Derived from max_position_embeddings / original_max_position_embeddings when that is given.
  const ModelConfig d = parse(cfg(R"("num_hidden_layers": 2, "max_position_embeddings": 64,
      "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 16})"));
  EXPECT_EQ(d.rope_scaling.factor, 4.0);
  e = error_of([] {
    parse(cfg(R"("num_hidden_layers": 2, "max_position_embeddings": 64,
        "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 128})"));
  });
  EXPECT_TRUE(has(e, "rope_scaling.factor: must be >= 1")) << e;
  EXPECT_EQ(parse(cfg(R"("num_hidden_layers": 2, "rope_scaling": {"rope_type": "yarn",
      "factor": 2.0})"))
                .rope_scaling.factor,
            2.0);
}

}  // namespace
}  // namespace hp::models
