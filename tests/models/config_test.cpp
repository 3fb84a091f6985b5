// config.json parsing and validation, weight loading errors, save_pretrained round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hp/io/json.h"
#include "hp/io/safetensors.h"
#include "hp/models/generate.h"
#include "hp/models/hf/registry.h"
#include "hp/models/rope.h"
#include "hp/models/hf/weights.h"
#include "hp/ops/ops.h"
#include "test_dir.h"

namespace hp::models {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/" + name;
}

ModelConfig parse(const std::string& text) {
  return parse_model_config(io::parse_json(text, "cfg.json"));
}

const char* kBase =
    R"("vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 4)";

std::string cfg(const std::string& arch, const std::string& extra = "") {
  return std::string("{\"architectures\": [\"") + arch + "\"], " + kBase +
         (extra.empty() ? "" : ", ") + extra + "}";
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse(text);
    FAIL() << "no error for " << text;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos) << e.what();
  }
}

TEST(Config, ParsesDenseFamiliesAndDefaults) {
  const ModelConfig c = parse(cfg("LlamaForCausalLM", R"("rope_theta": 500000.0)"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.dtype, DType::f32);
  const ModelConfig q = parse(cfg("Qwen3ForCausalLM", R"("head_dim": 16, "num_key_value_heads": 2,
      "torch_dtype": "bfloat16", "eos_token_id": [1, 2])"));
  EXPECT_EQ(q.head_dim, 16);
  EXPECT_EQ(q.dtype, DType::bf16);
  EXPECT_EQ(q.eos_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(parse(cfg("Qwen3ForCausalLM")).head_dim, 128);  // Qwen3Config's default
}

TEST(Config, ParsesRopeScalingInBothSpellings) {
  const ModelConfig v4 = parse(cfg("LlamaForCausalLM", R"("rope_theta": 5e5, "rope_scaling": {
      "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})"));
  EXPECT_EQ(v4.rope_scaling.type, "llama3");
  EXPECT_EQ(v4.rope_scaling.original_max_position_embeddings, 8192);
  const ModelConfig v5 = parse(cfg("LlamaForCausalLM", R"("rope_parameters": {"rope_type": "yarn",
      "factor": 4.0, "rope_theta": 1e4, "original_max_position_embeddings": 16})"));
  EXPECT_EQ(v5.rope_scaling.type, "yarn");
  EXPECT_EQ(v5.rope_theta, 1e4);
  // YaRN's default attention factor: 0.1 ln(4) + 1.
  EXPECT_NEAR(rope_frequencies(v5, 8).attention_factor, 0.1 * std::log(4.0) + 1, 1e-12);
}

TEST(Config, ParsesMoeFields) {
  const ModelConfig m =
      parse(cfg("MixtralForCausalLM", R"("num_local_experts": 8, "num_experts_per_tok": 2)"));
  EXPECT_EQ(m.num_experts, 8);
  const ModelConfig d = parse(cfg("DeepseekV3ForCausalLM", R"("n_routed_experts": 16,
      "num_experts_per_tok": 4, "n_shared_experts": 1, "kv_lora_rank": 32, "q_lora_rank": null,
      "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_group": 4,
      "topk_group": 2, "routed_scaling_factor": 2.5, "first_k_dense_replace": 1,
      "scoring_func": "sigmoid", "topk_method": "noaux_tc")"));
  EXPECT_EQ(d.num_experts, 16);
  EXPECT_EQ(d.q_lora_rank, 0);
  EXPECT_EQ(d.scoring_func, "sigmoid");
  EXPECT_THROW(build_model(d), ValueError);  // parsed, not (yet) buildable here
}

TEST(Config, RejectsBadConfigsNamingTheKey) {
  expect_error(cfg("GPT2LMHeadModel"), "unknown architecture 'GPT2LMHeadModel'");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8})",
               "hidden_size: missing");
  expect_error(cfg("LlamaForCausalLM", R"("num_key_value_heads": 3)"), "num_key_value_heads");
  expect_error(cfg("LlamaForCausalLM", R"("rms_norm_eps": -1)"), "rms_norm_eps");
  expect_error(cfg("LlamaForCausalLM", R"("torch_dtype": "int8")"), "torch_dtype");
  expect_error(cfg("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "longrope", "factor": 2})"),
               "rope_scaling.rope_type");
  expect_error(cfg("Qwen3MoeForCausalLM"), "num_experts");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 0})",
               "hidden_size: must be > 0");
  EXPECT_THROW(read_model_config("/nonexistent/dir"), IoError);
}

TEST(Config, JsonRoundTrip) {
  const ModelConfig c = read_model_config(fixture("llama_rope_llama3"));
  const ModelConfig r = parse_model_config(io::parse_json(model_config_to_json(c), "rt"));
  EXPECT_EQ(r.architecture, c.architecture);
  EXPECT_EQ(r.head_dim, c.head_dim);
  EXPECT_EQ(r.rope_scaling.type, "llama3");
  EXPECT_EQ(rope_frequencies(r, r.head_dim).inv_freq, rope_frequencies(c, c.head_dim).inv_freq);
}

// Every fixture's config exported and read back: the same model (a key written as 0 or left out
// would refuse to load or change the layers). Mixtral's export has no moe_intermediate_size, as
// transformers' MixtralConfig has none.
TEST(Config, ExportOfEveryFixtureLoadsBack) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fixture(""))) {
    if (!std::filesystem::exists(entry.path() / "config.json")) continue;
    const ModelConfig c = read_model_config(entry.path().string());
    const std::string text = model_config_to_json(c);
    const ModelConfig r = parse_model_config(io::parse_json(text, "rt"));
    const std::string what = entry.path().filename().string();
    EXPECT_EQ(r.architecture, c.architecture) << what;
    EXPECT_EQ(r.num_experts, c.num_experts) << what;
    EXPECT_EQ(r.intermediate_size, c.intermediate_size) << what;
    EXPECT_EQ(r.moe_intermediate_size, c.moe_intermediate_size) << what;
    EXPECT_EQ(model_config_to_json(r), text) << what;
    if (c.architecture == "MixtralForCausalLM") {
      EXPECT_FALSE(io::parse_json(text, "rt").contains("moe_intermediate_size"));
    }
    ++checked;
  }
  EXPECT_GE(checked, 18);
}

// Sliding windows of the Llama family (models/hf/sliding_window.cpp), as transformers derives them:
// Mistral's default 4096 and null; Qwen's use_sliding_window gate, max_window_layers and
// layer_types; the export round trip; bad values naming the key.
TEST(Config, SlidingWindowKeys) {
  EXPECT_EQ(parse(cfg("MistralForCausalLM")).sliding_window, 4096);
  EXPECT_EQ(parse(cfg("MistralForCausalLM", R"("sliding_window": null)")).sliding_window, 0);
  const ModelConfig m = parse(cfg("MistralForCausalLM", R"("sliding_window": 7)"));
  EXPECT_EQ(layer_sliding_window(m, 0), 7);
  EXPECT_EQ(layer_sliding_window(m, 1), 7);
  // Qwen2 without use_sliding_window: no window whatever sliding_window says.
  const ModelConfig off = parse(cfg("Qwen2ForCausalLM", R"("sliding_window": 7)"));
  EXPECT_EQ(layer_sliding_window(off, 1), 0);
  const ModelConfig q = parse(cfg(
      "Qwen2ForCausalLM", R"("use_sliding_window": true, "sliding_window": 7, "max_window_layers": 1)"));
  EXPECT_EQ(layer_sliding_window(q, 0), 0);
  EXPECT_EQ(layer_sliding_window(q, 1), 7);
  const ModelConfig t = parse(cfg("Qwen3ForCausalLM", R"("use_sliding_window": true,
      "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"])"));
  EXPECT_EQ(layer_sliding_window(t, 0), 3);
  EXPECT_EQ(layer_sliding_window(t, 1), 0);
  // Export, reload: the same window per layer.
  for (const ModelConfig* c : {&m, &q, &t}) {
    const ModelConfig r = parse_model_config(io::parse_json(model_config_to_json(*c), "rt"));
    for (int64_t l = 0; l < 2; ++l)
      EXPECT_EQ(layer_sliding_window(r, l), layer_sliding_window(*c, l)) << c->architecture;
  }
  const ModelConfig none = parse(cfg("MistralForCausalLM", R"("sliding_window": null)"));
  EXPECT_EQ(parse_model_config(io::parse_json(model_config_to_json(none), "rt")).sliding_window, 0);
  expect_error(cfg("MistralForCausalLM", R"("sliding_window": 0)"),
               "sliding_window: must be > 0 or null, got 0");
  expect_error(cfg("Qwen3ForCausalLM", R"("use_sliding_window": true,
                                         "layer_types": ["full_attention"])"),
               "layer_types: has 1 entries but num_hidden_layers is 2");
  expect_error(cfg("Qwen3ForCausalLM", R"("use_sliding_window": true,
                                         "layer_types": ["full_attention", "chunked"])"),
               "layer_types[1]: unknown layer type 'chunked'");
  // Without the window layer_types is not read (transformers writes it into every config).
  EXPECT_EQ(layer_sliding_window(parse(cfg("Qwen3ForCausalLM",
                                           R"("layer_types": ["full_attention"])")),
                                 1),
            0);
  expect_error(cfg("LlamaForCausalLM", R"("use_sliding_window": true)"),
               "use_sliding_window: sliding-window attention is not supported for "
               "LlamaForCausalLM");
}

// The exported config.json describes the router hp's DeepSeek-V3 layers ran (sigmoid scores,
// the correction bias selecting) when the source config lacks the keys — not softmax / greedy —
// keeps a source's own values, and records that no MTP layer was kept.
TEST(Config, DeepSeekExportWritesTheRouterThatRan) {
  const ModelConfig c = read_model_config(fixture("deepseek_v3"));  // no scoring_func/topk_method
  const io::Json j = io::parse_json(model_config_to_json(c), "export");
  EXPECT_EQ(j.get_string("scoring_func"), "sigmoid");
  EXPECT_EQ(j.get_string("topk_method"), "noaux_tc");
  EXPECT_EQ(j.get_int("num_nextn_predict_layers"), 0);
  const ModelConfig k = parse(cfg("DeepseekV3ForCausalLM", R"("n_routed_experts": 16,
      "num_experts_per_tok": 4, "scoring_func": "sigmoid", "topk_method": "noaux_tc")"));
  const io::Json jk = io::parse_json(model_config_to_json(k), "export");
  EXPECT_EQ(jk.get_string("scoring_func"), "sigmoid");
  EXPECT_EQ(jk.get_string("topk_method"), "noaux_tc");
}

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("hp_models_" + name);
  fs::remove_all(p);
  return p.string();
}

TEST(Weights, LoadErrorsNameTensorAndShapes) {
  ModelConfig c = read_model_config(fixture("llama"));
  c.intermediate_size = 48;
  auto m = build_model(c);
  try {
    load_weights(*m, fixture("llama"));
    FAIL();
  } catch (const IoError& e) {
    const std::string s = e.what();
    EXPECT_NE(s.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << s;
    EXPECT_NE(s.find("[64, 32]"), std::string::npos) << s;
    EXPECT_NE(s.find("[48, 32]"), std::string::npos) << s;
  }
  c = read_model_config(fixture("llama"));
  c.num_hidden_layers = 3;
  EXPECT_THROW(load_weights(*build_model(c), fixture("llama")), IoError);  // missing layer 2
  c.num_hidden_layers = 1;
  EXPECT_THROW(load_weights(*build_model(c), fixture("llama")), IoError);  // unexpected layer 1
}

TEST(Weights, SavePretrainedShardsAndReloads) {
  auto m = load_model(fixture("qwen2"));
  const char* keep = std::getenv("HP_MODELS_EXPORT_DIR");  // for the transformers check
  const std::string dir = keep ? keep : temp_dir("qwen2");
  save_pretrained(*m, dir, 40000);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  EXPECT_GT(io::SafetensorsCheckpoint::open(dir).files().size(), 1u);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
  if (keep)
    save_pretrained(*load_model(fixture("llama_rope_llama3")), std::string(keep) + "_llama3");
  auto r = load_model(dir);
  const Tensor ids = from_vector({1, 5, 9, 2, 7}, {1, 5}, DType::i64);
  EXPECT_EQ(r->forward(ids).to_vector(), m->forward(ids).to_vector());
  // Tied: no lm_head in the file; single file when it fits.
  auto t = load_model(fixture("llama_tied"));
  const std::string tdir = temp_dir("tied");
  save_pretrained(*t, tdir);
  EXPECT_TRUE(fs::exists(fs::path(tdir) / "model.safetensors"));
  EXPECT_FALSE(io::SafetensorsCheckpoint::open(tdir).contains("lm_head.weight"));
  EXPECT_EQ(load_model(tdir)->forward(ids).to_vector(), t->forward(ids).to_vector());
}

TEST(Generate, PickTokenGreedyAndTopP) {
  GenerateOptions g;
  EXPECT_EQ(pick_token({0.f, 3.f, 1.f}, g, 0.99), 1);
  GenerateOptions s;
  s.greedy = false;
  s.top_p = 0.5;  // only the top token survives
  EXPECT_EQ(pick_token({0.f, 3.f, 1.f}, s, 0.99), 1);
  s.top_p = 1.0;
  EXPECT_EQ(pick_token({0.f, 0.f}, s, 0.25), 0);
  EXPECT_EQ(pick_token({0.f, 0.f}, s, 0.75), 1);
}

TEST(Generate, CachedGreedyMatchesRecomputation) {
  auto m = load_model(fixture("llama"));
  GenerateOptions opt;
  opt.max_new_tokens = 6;
  const std::vector<int64_t> prompt = {3, 14, 15, 92};
  const auto out = generate(*m, prompt, opt);
  ASSERT_EQ(out.size(), 6u);
  std::vector<double> seq(prompt.begin(), prompt.end());
  for (int64_t tok : out) {
    const int64_t t = static_cast<int64_t>(seq.size());
    const Tensor logits = m->forward(from_vector(seq, {1, t}, DType::i64));
    const auto row = narrow(logits, 1, t - 1, 1).contiguous().to_vector_as<float>();
    EXPECT_EQ(pick_token(row, opt, 0), tok);
    seq.push_back(static_cast<double>(tok));
  }
}

}  // namespace
}  // namespace hp::models
