#include "hp/models/hf/config.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/models/hf/registry.h"

namespace hp::models {

namespace {

[[noreturn]] void fail(const io::Json& j, const std::string& key, const std::string& what) {
  HP_THROW(IoError, "config", j.file(), ": ", key, ": ", what);
}

int64_t positive(const io::Json& j, const char* key, bool required, int64_t def) {
  if (!j.contains(key) || j.at(key).is_null()) {
    if (required) fail(j, key, "missing required key");
    return def;
  }
  const int64_t v = j.at(key).as_int();
  if (v <= 0) fail(j, key, "must be > 0, got " + std::to_string(v));
  return v;
}

DType parse_dtype(const io::Json& j, const std::string& key) {
  const std::string s = j.get_string(key);
  if (s == "float32") return DType::f32;
  if (s == "bfloat16") return DType::bf16;
  if (s == "float16") return DType::f16;
  fail(j, key, "unsupported dtype '" + s + "' (float32, bfloat16, float16)");
}

RopeScaling parse_rope(const io::Json& r, const std::string& key, ModelConfig& c) {
  RopeScaling s;
  if (auto t = r.find("rope_type"); t && !t->is_null())
    s.type = t->as_string();
  else if (auto t2 = r.find("type"); t2 && !t2->is_null())
    s.type = t2->as_string();
  if (r.contains("rope_theta")) c.rope_theta = r.get_double("rope_theta");
  if (s.type == "default") return s;
  if (s.type != "linear" && s.type != "dynamic" && s.type != "yarn" && s.type != "llama3")
    fail(r, key + ".rope_type",
         "unsupported rope type '" + s.type + "' (default, linear, dynamic, yarn, llama3)");
  const bool has_factor = r.contains("factor") && !r.at("factor").is_null();
  const bool has_original = r.contains("original_max_position_embeddings") &&
                            !r.at("original_max_position_embeddings").is_null();
  // YaRN without a factor derives it from max_position_embeddings / the original context, so
  // that must be given: else the "scaling" would silently be none (factor 1).
  if (!has_factor && !(s.type == "yarn" && has_original))
    fail(r, key + ".factor",
         "missing: rope type " + s.type + " needs a factor >= 1" +
             (s.type == "yarn" ? " (or original_max_position_embeddings to derive it from)" : ""));
  s.factor = r.get_double_or("factor", 0.0);
  s.original_max_position_embeddings =
      r.get_int_or("original_max_position_embeddings", c.max_position_embeddings);
  if (s.original_max_position_embeddings <= 0)
    fail(r, key + ".original_max_position_embeddings",
         "must be > 0, got " + std::to_string(s.original_max_position_embeddings));
  if (!has_factor)
    s.factor = static_cast<double>(c.max_position_embeddings) /
               static_cast<double>(s.original_max_position_embeddings);
  if (!(s.factor >= 1.0))
    fail(r, key + ".factor",
         "must be >= 1 for rope type " + s.type + ", got " + std::to_string(s.factor) +
             (has_factor ? "" : " (max_position_embeddings / original_max_position_embeddings)"));
  if (s.type == "llama3") {
    s.low_freq_factor = r.get_double("low_freq_factor");
    s.high_freq_factor = r.get_double("high_freq_factor");
    if (!(s.high_freq_factor > s.low_freq_factor))
      fail(r, key + ".high_freq_factor", "must exceed low_freq_factor");
  }
  if (s.type == "yarn") {
    if (auto a = r.find("attention_factor"); a && !a->is_null())
      s.attention_factor = a->as_double();
    s.beta_fast = r.get_double_or("beta_fast", 32.0);
    s.beta_slow = r.get_double_or("beta_slow", 1.0);
    s.mscale = r.get_double_or("mscale", 0.0);
    s.mscale_all_dim = r.get_double_or("mscale_all_dim", 0.0);
    s.truncate = r.get_bool_or("truncate", true);
  }
  return s;
}

std::vector<int64_t> int_list(const io::Json& j, const char* key) {
  std::vector<int64_t> out;
  if (auto v = j.find(key); v && !v->is_null()) {
    if (v->is_array())
      for (const auto& e : v->elements()) out.push_back(e.as_int());
    else
      out.push_back(v->as_int());
  }
  return out;
}

// quantization_config: the FP8 block format (mx/fp8_blocks.h) is the one hp reads. Keys default as
// transformers' FineGrainedFP8Config does; anything else is refused, naming the key and value.
mx::Fp8BlockSize parse_fp8_blocks(const io::Json& q) {
  const std::string key = "quantization_config";
  if (!q.is_object())
    fail(q, key, std::string("expected an object, got ") + std::string(q.type_name()));
  const std::string method = q.get_string_or("quant_method", "");
  if (method != "fp8")
    fail(q, key + ".quant_method",
         "unsupported quantization method '" + method +
             "' (hp reads \"fp8\" block-quantized "
             "checkpoints)");
  const std::string fmt = q.get_string_or("fmt", "e4m3");
  if (fmt != "e4m3") fail(q, key + ".fmt", "unsupported FP8 format '" + fmt + "' (hp reads e4m3)");
  const std::string scheme = q.get_string_or("activation_scheme", "dynamic");
  if (scheme != "dynamic")
    fail(q, key + ".activation_scheme",
         "unsupported activation scheme '" + scheme + "' (hp reads dynamic)");
  mx::Fp8BlockSize b;
  if (auto w = q.find("weight_block_size"); w && !w->is_null()) {
    const bool ok = w->is_array() && w->size() == 2 && w->at(0).is_integer() &&
                    w->at(1).is_integer() && w->at(0).as_int() > 0 && w->at(1).as_int() > 0;
    if (!ok)
      fail(q, key + ".weight_block_size",
           "unsupported block size " + w->dump() + " (two positive sizes, e.g. [128, 128])");
    b.rows = w->at(0).as_int();
    b.cols = w->at(1).as_int();
  }
  return b;
}

}  // namespace

RopeScaling parse_rope_parameters(const io::Json& r, const std::string& key, ModelConfig& c) {
  return parse_rope(r, key, c);
}

SizeOverflow parameter_count_overflow(const ModelConfig& c, const SizeKeys& k) {
  struct F {
    int64_t v;
    const std::string& key;
  };
  SizeOverflow out;
  // Π factors, or 0 after recording the largest factor of the first product that overflows.
  auto mul = [&](std::initializer_list<F> fs, const char* what) -> int64_t {
    int64_t p = 1;
    for (const F& f : fs)
      if (__builtin_mul_overflow(p, std::max<int64_t>(f.v, 0), &p)) {
        const F* big = fs.begin();
        for (const F& g : fs)
          if (g.v > big->v) big = &g;
        if (out.key.empty()) {
          out.key = big->key;
          out.what =
              std::to_string(big->v) + " makes the " + what + " parameter count overflow int64";
        }
        return 0;
      }
    return p;
  };
  const std::string none;
  const int64_t two = 2, three = 3;
  // Each term fits int64 (or is 0 after an error): their sum, saturated, fits uint64.
  const uint64_t attention = uint64_t(mul({{two, none},
                                           {c.hidden_size, k.hidden},
                                           {c.num_attention_heads, k.heads},
                                           {c.head_dim, k.head_dim}},
                                          "attention")) +
                             uint64_t(mul({{two, none},
                                           {c.hidden_size, k.hidden},
                                           {c.num_key_value_heads, k.kv_heads},
                                           {c.head_dim, k.head_dim}},
                                          "attention"));
  const uint64_t mlp = uint64_t(std::max(
      mul({{three, none}, {c.hidden_size, k.hidden}, {c.intermediate_size, k.intermediate}}, "MLP"),
      c.is_moe() ? mul({{three, none},
                        {c.num_experts, k.experts},
                        {c.hidden_size, k.hidden},
                        {c.moe_intermediate_size, k.moe_intermediate}},
                       "experts'")
                 : 0));
  const uint64_t per_layer = attention + mlp;
  int64_t layers = 0, embed = 0, total = 0;
  if (out.key.empty() && (per_layer > uint64_t(INT64_MAX) ||
                          __builtin_mul_overflow(std::max<int64_t>(c.num_hidden_layers, 0),
                                                 static_cast<int64_t>(per_layer), &layers))) {
    out.key = k.layers;
    out.what = std::to_string(c.num_hidden_layers) + " layers of " + std::to_string(per_layer) +
               " parameters overflow int64";
  }
  embed =
      mul({{two, none}, {c.vocab_size, k.vocab}, {c.hidden_size, k.hidden}}, "embedding and head");
  if (out.key.empty() && __builtin_add_overflow(layers, embed, &total)) {
    out.key = k.layers;
    out.what = std::to_string(c.num_hidden_layers) +
               " layers make the total parameter count overflow int64";
  }
  // A layer count that fits int64 can still be absurd (10^12 layers of a tiny model): building
  // the model, or counting its parameters layer by layer (`hp model info` without weights), would
  // run for years before failing.
  if (out.key.empty() && c.num_hidden_layers > kMaxLayers) {
    out.key = k.layers;
    out.what = std::to_string(c.num_hidden_layers) + " layers is more than the " +
               std::to_string(kMaxLayers) + " hp accepts (no model is that deep)";
  }
  return out;
}

ModelConfig parse_model_config(const io::Json& j) {
  ModelConfig c;
  c.file = j.file();
  if (!j.is_object()) fail(j, "<root>", "expected an object");
  if (auto a = j.find("architectures"); a && a->is_array() && a->size() > 0)
    c.architecture = a->at(0).as_string();
  c.model_type = j.get_string_or("model_type", "");
  // The row of the architecture table (models/hf/registry.h) says what this family's keys mean.
  const Architecture* arch = nullptr;
  if (c.architecture.empty()) {
    arch = find_architecture_by_model_type(c.model_type);
    if (!arch) fail(j, "architectures", "missing (and no known model_type)");
    c.architecture = arch->hf_class;
  }
  arch = find_architecture(c.architecture);
  if (!arch) {
    std::string list;
    for (const Architecture& a : architectures()) list += (list.empty() ? "" : ", ") + a.hf_class;
    fail(j, "architectures", "unknown architecture '" + c.architecture + "' (" + list + ")");
  }
  if (c.model_type.empty()) c.model_type = arch->model_type;

  c.vocab_size = positive(j, "vocab_size", true, 0);
  c.hidden_size = positive(j, "hidden_size", true, 0);
  c.intermediate_size = positive(j, "intermediate_size", arch->needs_intermediate_size, 0);
  c.num_hidden_layers = positive(j, "num_hidden_layers", true, 0);
  c.num_attention_heads = positive(j, "num_attention_heads", true, 0);
  c.num_key_value_heads = positive(j, "num_key_value_heads", false, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(j, "num_key_value_heads",
         "must divide num_attention_heads (" + std::to_string(c.num_attention_heads) + "), got " +
             std::to_string(c.num_key_value_heads));
  // Some configs default head_dim (Qwen3Config: 128, not hidden / heads) when config.json omits it.
  c.head_dim = positive(j, "head_dim", false, arch->default_head_dim);
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(j, "hidden_size", "not divisible by num_attention_heads and no head_dim given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) fail(j, "head_dim", "must be even for RoPE");
  c.max_position_embeddings = positive(j, "max_position_embeddings", false, 2048);
  c.rms_norm_eps = j.get_double_or("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) fail(j, "rms_norm_eps", "must be > 0");
  c.initializer_range = j.get_double_or("initializer_range", 0.02);
  c.rope_theta = j.get_double_or("rope_theta", 10000.0);
  if (auto r = j.find("rope_parameters"); r && r->is_object())
    c.rope_scaling = parse_rope(*r, "rope_parameters", c);
  else if (auto r2 = j.find("rope_scaling"); r2 && r2->is_object())
    c.rope_scaling = parse_rope(*r2, "rope_scaling", c);
  if (!(c.rope_theta > 0)) fail(j, "rope_theta", "must be > 0");
  c.tie_word_embeddings = j.get_bool_or("tie_word_embeddings", false);
  c.attention_bias = j.get_bool_or("attention_bias", false);
  c.mlp_bias = j.get_bool_or("mlp_bias", false);
  c.hidden_act = j.get_string_or("hidden_act", "silu");
  if (c.hidden_act != "silu") fail(j, "hidden_act", "only silu is supported, got " + c.hidden_act);
  // Families with a sliding window read it in their parse_extra (models/hf/sliding_window.cpp).
  if (!arch->parse_extra && j.get_bool_or("use_sliding_window", false))
    fail(j, "use_sliding_window",
         "sliding-window attention is not supported for " + c.architecture);
  if (j.contains("dtype") && !j.at("dtype").is_null())
    c.dtype = parse_dtype(j, "dtype");
  else if (j.contains("torch_dtype") && !j.at("torch_dtype").is_null())
    c.dtype = parse_dtype(j, "torch_dtype");
  if (auto b = j.find("bos_token_id"); b && !b->is_null()) c.bos_token_id = b->as_int();
  c.eos_token_ids = int_list(j, "eos_token_id");

  // MoE: the three families name the expert count differently.
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (j.contains(key) && !j.at(key).is_null()) c.num_experts = positive(j, key, true, 0);
  c.num_experts_per_tok = j.get_int_or("num_experts_per_tok", 0);
  c.moe_intermediate_size = positive(j, "moe_intermediate_size", false, 0);
  c.norm_topk_prob = j.get_bool_or("norm_topk_prob", false);
  c.decoder_sparse_step = j.get_int_or("decoder_sparse_step", 1);
  c.mlp_only_layers = int_list(j, "mlp_only_layers");
  c.output_router_logits = j.get_bool_or("output_router_logits", false);
  c.router_aux_loss_coef =
      j.get_double_or("router_aux_loss_coef", arch->default_router_aux_loss_coef);
  c.n_shared_experts = j.get_int_or("n_shared_experts", 0);
  c.kv_lora_rank = j.get_int_or("kv_lora_rank", 0);
  c.q_lora_rank = j.get_int_or("q_lora_rank", 0);
  c.qk_nope_head_dim = j.get_int_or("qk_nope_head_dim", 0);
  c.qk_rope_head_dim = j.get_int_or("qk_rope_head_dim", 0);
  c.v_head_dim = j.get_int_or("v_head_dim", 0);
  c.n_group = j.get_int_or("n_group", 1);
  c.topk_group = j.get_int_or("topk_group", 1);
  c.first_k_dense_replace = j.get_int_or("first_k_dense_replace", 0);
  c.routed_scaling_factor = j.get_double_or("routed_scaling_factor", 1.0);
  c.scoring_func = j.get_string_or("scoring_func", c.scoring_func);
  c.topk_method = j.get_string_or("topk_method", c.topk_method);
  c.rope_interleave = j.get_bool_or("rope_interleave", true);
  c.num_nextn_predict_layers = j.get_int_or("num_nextn_predict_layers", 0);
  if (c.num_nextn_predict_layers < 0)
    fail(j, "num_nextn_predict_layers",
         "must be >= 0, got " + std::to_string(c.num_nextn_predict_layers));
  if (auto q = j.find("quantization_config"); q && !q->is_null())
    c.fp8_blocks = parse_fp8_blocks(*q);
  if (c.is_moe()) {
    if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
      fail(j, "num_experts_per_tok",
           "must be in [1, " + std::to_string(c.num_experts) + "], got " +
               std::to_string(c.num_experts_per_tok));
  } else if (arch->moe()) {
    fail(j, arch->experts_key, c.architecture + " needs an expert count");
  }
  if (arch->parse_extra) arch->parse_extra(j, c);
  // Sizes no model can have (their parameter count overflows int64) fail here, naming the key,
  // before anything is allocated for them.
  SizeKeys keys;
  if (arch->moe()) keys.experts = arch->experts_key;
  if (const SizeOverflow o = parameter_count_overflow(c, keys); !o.key.empty())
    fail(j, o.key, o.what);
  return c;
}

ModelConfig read_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string file =
      fs::is_directory(path) ? (fs::path(path) / "config.json").string() : path;
  if (!fs::exists(file)) HP_THROW(IoError, "config", file, ": file not found");
  return parse_model_config(io::read_json_file(file));
}

std::string model_config_to_json(const ModelConfig& c) {
  io::JsonValue j;
  j["architectures"] = io::JsonValue::array({c.architecture});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["initializer_range"] = c.initializer_range;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["hidden_act"] = c.hidden_act;
  j["torch_dtype"] = c.dtype == DType::bf16  ? "bfloat16"
                     : c.dtype == DType::f16 ? "float16"
                                             : "float32";
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  const RopeScaling& r = c.rope_scaling;
  if (r.type != "default") {
    io::JsonValue s;
    s["rope_type"] = r.type;
    s["factor"] = r.factor;
    if (r.type == "llama3" || r.type == "yarn")
      s["original_max_position_embeddings"] = r.original_max_position_embeddings;
    if (r.type == "llama3") {
      s["low_freq_factor"] = r.low_freq_factor;
      s["high_freq_factor"] = r.high_freq_factor;
    }
    if (r.type == "yarn") {
      if (r.attention_factor) s["attention_factor"] = *r.attention_factor;
      s["beta_fast"] = r.beta_fast;
      s["beta_slow"] = r.beta_slow;
      if (r.mscale != 0) s["mscale"] = r.mscale;
      if (r.mscale_all_dim != 0) s["mscale_all_dim"] = r.mscale_all_dim;
    }
    j["rope_scaling"] = s;
  }
  const Architecture* arch = find_architecture(c.architecture);
  if (c.is_moe()) {
    j[arch && arch->moe() ? arch->experts_key : "num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    // Mixtral's experts are intermediate_size wide and its config has no such key: a 0 here
    // would not load back.
    if (c.moe_intermediate_size > 0) j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["output_router_logits"] = c.output_router_logits;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  }
  if (arch && arch->mla) {
    j["n_shared_experts"] = c.n_shared_experts;
    j["kv_lora_rank"] = c.kv_lora_rank;
    if (c.q_lora_rank > 0) j["q_lora_rank"] = c.q_lora_rank;
    j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["v_head_dim"] = c.v_head_dim;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["first_k_dense_replace"] = c.first_k_dense_replace;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["scoring_func"] = c.scoring_func;
    j["topk_method"] = c.topk_method;
    j["rope_interleave"] = c.rope_interleave;
    // The model holds no next-token-prediction layers (load_weights skipped them).
    j["num_nextn_predict_layers"] = 0;
  }
  if (arch && arch->extra_json) {
    j.update(io::parse_json_value(arch->extra_json(c), c.architecture + " config extras"));
  }
  return j.dump(2) + "\n";
}

}  // namespace hp::models
