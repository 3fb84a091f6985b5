// The architecture table (models/hf/registry.h): its rows, lookups, run-time registration, and the
// per-family config.json facts that config.json parsing and writing derive from it.
#include "hp/models/hf/registry.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "error_of.h"
#include "hp/core/error.h"
#include "hp/io/json.h"

namespace hp::models {
namespace {

ModelConfig parse(const std::string& text) {
  return parse_model_config(io::parse_json(text, "cfg.json"));
}

const char* kSizes =
    R"("vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 4)";

using hp::testing::error_of;

TEST(Registry, BuiltInRowsAreUniqueAndFindable) {
  const std::vector<Architecture> rows = architectures();
  std::vector<std::string> classes;
  std::set<std::string> types, names;
  for (const auto& a : rows) {
    classes.push_back(a.hf_class);
    EXPECT_TRUE(types.insert(a.model_type).second) << a.model_type;
    EXPECT_TRUE(names.insert(a.short_name).second) << a.short_name;
    EXPECT_TRUE(a.layers.attention && a.layers.mlp) << a.hf_class;
    EXPECT_EQ(find_architecture(a.hf_class), find_architecture_by_short_name(a.short_name));
    EXPECT_EQ(find_architecture(a.hf_class), find_architecture_by_model_type(a.model_type));
  }
  const std::vector<std::string> builtin = {"LlamaForCausalLM",   "Qwen2ForCausalLM",
                                            "Qwen3ForCausalLM",   "Qwen3MoeForCausalLM",
                                            "MixtralForCausalLM", "DeepseekV3ForCausalLM"};
  ASSERT_GE(classes.size(), builtin.size());
  EXPECT_EQ(std::vector<std::string>(classes.begin(), classes.begin() + 6), builtin);
  EXPECT_EQ(architecture_by_short_name("qwen3_moe").hf_class, "Qwen3MoeForCausalLM");
  EXPECT_FALSE(architecture("DeepseekV3ForCausalLM").buildable_from_sizes);
  EXPECT_TRUE(architecture("MixtralForCausalLM").moe());
  EXPECT_FALSE(architecture("Qwen3ForCausalLM").moe());
  EXPECT_EQ(find_architecture("GPT2LMHeadModel"), nullptr);
  EXPECT_NE(error_of([] {
              architecture("GPT2LMHeadModel");
            }).find("architecture 'GPT2LMHeadModel' is not implemented (LlamaForCausalLM, "),
            std::string::npos);
  EXPECT_NE(error_of([] {
              architecture_by_short_name("gpt2");
            }).find("architecture short name 'gpt2' is unknown (llama, qwen2, "),
            std::string::npos);
}

TEST(Registry, RegistrationRejectsIncompleteOrClashingRows) {
  Architecture row = architecture("LlamaForCausalLM");
  row.hf_class = "RegistryTestForCausalLM";
  row.model_type = "registry_test";
  row.short_name = "llama";  // llama's
  EXPECT_NE(error_of([&] { register_architecture(row); }).find("short name 'llama' is already"),
            std::string::npos);
  row.short_name = "registry_test";
  row.model_type = "qwen3";  // Qwen3's
  EXPECT_NE(error_of([&] { register_architecture(row); }).find("model_type 'qwen3' is already"),
            std::string::npos);
  row.model_type = "registry_test";
  Architecture no_mlp = row;
  no_mlp.layers.mlp = nullptr;
  EXPECT_NE(error_of([&] { register_architecture(no_mlp); }).find("needs both attention and mlp"),
            std::string::npos);
  Architecture unnamed = row;
  unnamed.short_name.clear();
  EXPECT_NE(error_of([&] { register_architecture(unnamed); }).find("must not be empty"),
            std::string::npos);
  EXPECT_EQ(find_architecture("RegistryTestForCausalLM"), nullptr);
}

// A registered row is known to config.json parsing (by class or by model_type alone), builds, and
// writes its config.json back; registering the same class again replaces the row in place.
TEST(Registry, RegisteredArchitectureIsKnownToConfigJson) {
  Architecture row = architecture("LlamaForCausalLM");
  row.hf_class = "RegistryJsonForCausalLM";
  row.model_type = "registry_json";
  row.short_name = "registry_json";
  row.default_head_dim = 4;
  EXPECT_THROW(
      parse(std::string(R"({"architectures": ["RegistryJsonForCausalLM"], )") + kSizes + "}"),
      IoError);
  register_architecture(row);
  const Architecture* where = find_architecture("RegistryJsonForCausalLM");
  ASSERT_NE(where, nullptr);
  const ModelConfig c =
      parse(std::string(R"({"architectures": ["RegistryJsonForCausalLM"], )") + kSizes + "}");
  EXPECT_EQ(c.model_type, "registry_json");
  EXPECT_EQ(c.head_dim, 4);  // the row's default, not hidden / heads
  const ModelConfig by_type =
      parse(std::string(R"({"model_type": "registry_json", )") + kSizes + "}");
  EXPECT_EQ(by_type.architecture, "RegistryJsonForCausalLM");
  EXPECT_GT(build_model(c)->num_parameters(), 0);
  const io::Json j = io::parse_json(model_config_to_json(c), "config.json");
  EXPECT_EQ(j.at("architectures").at(0).as_string(), "RegistryJsonForCausalLM");
  EXPECT_EQ(j.get_string("model_type"), "registry_json");

  row.default_head_dim = 8;
  register_architecture(row);
  EXPECT_EQ(find_architecture("RegistryJsonForCausalLM"), where);  // replaced in place
  EXPECT_EQ(parse(std::string(R"({"architectures": ["RegistryJsonForCausalLM"], )") + kSizes + "}")
                .head_dim,
            8);
}

// What config.json parsing and writing take from the rows: Qwen3's head_dim default, the MoE
// families' router-loss default, the expert-count key each family writes, a MoE family without an
// expert count, and the MLA keys.
TEST(Registry, ConfigJsonFactsComeFromTheRows) {
  const std::string sizes = kSizes;
  auto with = [&](const std::string& cls, const std::string& extra = "") {
    return std::string("{\"architectures\": [\"") + cls + "\"], " + sizes +
           (extra.empty() ? "" : ", ") + extra + "}";
  };
  EXPECT_EQ(parse(with("Qwen3ForCausalLM")).head_dim, 128);
  EXPECT_EQ(parse(with("LlamaForCausalLM")).head_dim, 8);
  const std::string experts = R"("num_experts": 4, "num_experts_per_tok": 2)";
  EXPECT_DOUBLE_EQ(parse(with("Qwen3MoeForCausalLM", experts)).router_aux_loss_coef, 0.001);
  EXPECT_DOUBLE_EQ(parse(with("MixtralForCausalLM", experts)).router_aux_loss_coef, 0.001);
  EXPECT_DOUBLE_EQ(parse(with("DeepseekV3ForCausalLM", experts)).router_aux_loss_coef, 0.0);
  for (const char* cls : {"Qwen3MoeForCausalLM", "MixtralForCausalLM", "DeepseekV3ForCausalLM"}) {
    const Architecture& a = architecture(cls);
    const io::Json j = io::parse_json(model_config_to_json(parse(with(cls, experts))), cls);
    EXPECT_EQ(j.get_int(a.experts_key), 4) << cls;
    EXPECT_EQ(j.contains("kv_lora_rank"), a.mla) << cls;
    try {
      parse(with(cls));
      ADD_FAILURE() << cls << ": no error without experts";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(a.experts_key + ": " + cls + " needs an expert count"),
                std::string::npos)
          << e.what();
    }
  }
}

// The tensor-parallel plan is the row's: the Llama family's decoder plan, none for MLA.
TEST(Registry, TensorParallelPlanComesFromTheRow) {
  EXPECT_EQ(architecture("Qwen3ForCausalLM").tp_plan, &decoder_tp_plan);
  EXPECT_EQ(architecture("DeepseekV3ForCausalLM").tp_plan, nullptr);
  ModelConfig c;
  c.architecture = "DeepseekV3ForCausalLM";
  EXPECT_EQ(error_of([&] { tp_plan(c, false); }),
            "[models] DeepseekV3ForCausalLM: no tensor-parallel plan for this architecture (use "
            "parallel.tp: 1)");
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  const shard::ShardingPlan plan = tp_plan(c, /*sequence_parallel=*/true);
  bool vocab_parallel = false;
  for (const auto& [pattern, style] : plan)
    vocab_parallel |= pattern == "model.embed_tokens" && style->name() == "VocabParallelEmbedding";
  EXPECT_TRUE(vocab_parallel);
}

}  // namespace
}  // namespace hp::models
