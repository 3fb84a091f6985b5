// DeepSeek-V4's config.json keys and checkpoint names (models/deepseek_v4.h), as transformers'
// DeepseekV4Config reads them: layer_types / mlp_layer_types (or the legacy compress_ratios /
// num_hash_layers), compress_rates, the mHC and compressor sizes, and the nested rope_parameters
// {"main": ..., "compress": ...}.
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/models/deepseek_v4.h"

namespace hp::models {

namespace {

[[noreturn]] void fail(const io::Json& j, const std::string& key, const std::string& what) {
  HP_THROW(IoError, "config", j.file(), ": ", key, ": ", what);
}

int64_t positive_or(const io::Json& j, const char* key, int64_t def) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  const int64_t v = j.at(key).as_int();
  if (v <= 0) fail(j, key, "must be > 0, got " + std::to_string(v));
  return v;
}

// A per-layer string list: num_hidden_layers entries, each one of `allowed`.
std::vector<std::string> layer_list(const io::Json& j, const char* key, int64_t layers,
                                    const std::vector<std::string>& allowed) {
  const io::Json v = j.at(key);
  if (!v.is_array()) fail(j, key, "must be a list, got " + v.dump());
  std::vector<std::string> out;
  for (const io::Json& e : v.elements()) out.push_back(e.as_string());
  // transformers truncates a longer list to the layer count; a shorter one is an error there too.
  if (static_cast<int64_t>(out.size()) < layers)
    fail(j, key,
         "has " + std::to_string(out.size()) + " entries but num_hidden_layers is " +
             std::to_string(layers));
  out.resize(static_cast<size_t>(layers));
  for (size_t i = 0; i < out.size(); ++i) {
    bool ok = false;
    std::string names;
    for (const std::string& a : allowed) {
      ok = ok || out[i] == a;
      names += (names.empty() ? "" : ", ") + a;
    }
    if (!ok)
      fail(j, std::string(key) + "[" + std::to_string(i) + "]",
           "unknown type '" + out[i] + "' (" + names + ")");
  }
  return out;
}

}  // namespace

const char* const kSlidingAttention = "sliding_attention";
const char* const kCompressedSparseAttention = "compressed_sparse_attention";
const char* const kHeavilyCompressedAttention = "heavily_compressed_attention";

void parse_deepseek_v4_fields(const io::Json& j, ModelConfig& c) {
  const int64_t n = c.num_hidden_layers;
  // compress_rates (or the legacy scalar keys), per attention type.
  if (auto r = j.find("compress_rates"); r && r->is_object()) {
    c.compress_rate_csa = positive_or(*r, kCompressedSparseAttention, 4);
    c.compress_rate_hca = positive_or(*r, kHeavilyCompressedAttention, 128);
  }
  c.compress_rate_csa = positive_or(j, "compress_rate_csa", c.compress_rate_csa);
  c.compress_rate_hca = positive_or(j, "compress_rate_hca", c.compress_rate_hca);

  const std::vector<std::string> attn = {kSlidingAttention, kCompressedSparseAttention,
                                         kHeavilyCompressedAttention};
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    c.layer_types = layer_list(j, "layer_types", n, attn);
  } else if (j.contains("compress_ratios") && !j.at("compress_ratios").is_null()) {
    // Legacy per-layer ratios: 0 sliding, 4 CSA, 128 HCA.
    const auto ratios = j.at("compress_ratios").elements();
    if (static_cast<int64_t>(ratios.size()) < n)
      fail(j, "compress_ratios",
           "has " + std::to_string(ratios.size()) + " entries but num_hidden_layers is " +
               std::to_string(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = ratios[static_cast<size_t>(i)].as_int();
      if (r != 0 && r != 4 && r != 128)
        fail(j, "compress_ratios[" + std::to_string(i) + "]",
             "must be 0, 4 or 128, got " + std::to_string(r));
      c.layer_types.push_back(r == 0 ? attn[0] : r == 4 ? attn[1] : attn[2]);
    }
  } else {
    // DeepseekV4Config's default: 2 HCA, then CSA / HCA alternating.
    for (int64_t i = 0; i < n; ++i)
      c.layer_types.push_back(i < 2 ? attn[2] : ((i - 2) % 2 ? attn[1] : attn[2]));
  }
  if (j.contains("mlp_layer_types") && !j.at("mlp_layer_types").is_null()) {
    c.mlp_layer_types = layer_list(j, "mlp_layer_types", n, {"hash_moe", "moe"});
  } else {
    const int64_t hash = j.get_int_or("num_hash_layers", 3);
    for (int64_t i = 0; i < n; ++i) c.mlp_layer_types.push_back(i < hash ? "hash_moe" : "moe");
  }

  c.hc_mult = positive_or(j, "hc_mult", 4);
  c.hc_sinkhorn_iters = positive_or(j, "hc_sinkhorn_iters", 20);
  c.hc_eps = j.get_double_or("hc_eps", 1e-6);
  c.swiglu_limit = j.get_double_or("swiglu_limit", 10.0);
  if (!(c.swiglu_limit >= 0)) fail(j, "swiglu_limit", "must be >= 0");
  c.sliding_window = positive_or(j, "sliding_window", 128);
  c.o_groups = positive_or(j, "o_groups", 8);
  c.o_lora_rank = positive_or(j, "o_lora_rank", 1024);
  c.index_n_heads = positive_or(j, "index_n_heads", 64);
  c.index_head_dim = positive_or(j, "index_head_dim", 128);
  c.index_topk = positive_or(j, "index_topk", 512);
  c.q_lora_rank = positive_or(j, "q_lora_rank", 1024);
  c.scoring_func = j.get_string_or("scoring_func", "sqrtsoftplus");
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "sigmoid" &&
      c.scoring_func != "softmax")
    fail(j, "scoring_func",
         "unknown router scoring '" + c.scoring_func + "' (sqrtsoftplus, sigmoid, softmax)");
  c.norm_topk_prob = j.get_bool_or("norm_topk_prob", true);
  c.routed_scaling_factor = j.get_double_or("routed_scaling_factor", 1.5);
  c.n_shared_experts = j.get_int_or("n_shared_experts", 1);
  if (c.moe_intermediate_size <= 0) fail(j, "moe_intermediate_size", "missing or not > 0");
  if (c.intermediate_size == 0) c.intermediate_size = c.moe_intermediate_size;
  if ((c.num_attention_heads * c.head_dim) % c.o_groups != 0)
    fail(j, "o_groups",
         "must divide num_attention_heads × head_dim = " +
             std::to_string(c.num_attention_heads * c.head_dim) + ", got " +
             std::to_string(c.o_groups));

  // partial_rotary_factor (or the legacy qk_rope_head_dim): the rotated trailing slice per head.
  double partial = 64.0 / 512.0;
  if (j.contains("partial_rotary_factor") && !j.at("partial_rotary_factor").is_null())
    partial = j.get_double("partial_rotary_factor");
  else if (j.contains("qk_rope_head_dim") && !j.at("qk_rope_head_dim").is_null())
    partial = double(j.get_int("qk_rope_head_dim")) / double(c.head_dim);
  c.qk_rope_head_dim = static_cast<int64_t>(double(c.head_dim) * partial);
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 2 != 0 || c.qk_rope_head_dim > c.head_dim ||
      c.qk_rope_head_dim > c.index_head_dim)
    fail(j, "partial_rotary_factor",
         "head_dim (" + std::to_string(c.head_dim) + ") × " + io::JsonValue(partial).dump() +
             " = " + std::to_string(c.qk_rope_head_dim) +
             " rotary channels must be even, > 0 and at most head_dim and index_head_dim");

  // rope_parameters {"main": ..., "compress": ...}: main is plain RoPE at rope_theta, compress
  // (compress_rope_theta, maybe yarn with attention_factor 1) serves the CSA / HCA layers.
  c.compress_rope_theta = j.get_double_or("compress_rope_theta", 160000.0);
  if (auto r = j.find("rope_parameters"); r && r->is_object()) {
    if (auto m = r->find("main"); m && m->is_object()) {
      ModelConfig t = c;
      c.rope_scaling = parse_rope_parameters(*m, "rope_parameters.main", t);
      c.rope_theta = t.rope_theta;
    }
    if (auto m = r->find("compress"); m && m->is_object()) {
      ModelConfig t = c;
      t.rope_theta = c.compress_rope_theta;
      c.compress_rope = parse_rope_parameters(*m, "rope_parameters.compress", t);
      c.compress_rope_theta = t.rope_theta;
      if (c.compress_rope.type == "yarn" && !c.compress_rope.attention_factor)
        c.compress_rope.attention_factor = 1.0;
    }
  }
  // The layer-type strings are checked above; the hash tables come with the weights.
  if (c.num_experts_per_tok > c.num_experts)
    fail(j, "num_experts_per_tok", "must be <= n_routed_experts");
}

std::string deepseek_v4_json(const ModelConfig& c) {
  io::JsonValue j;
  j["layer_types"] = c.layer_types;
  j["mlp_layer_types"] = c.mlp_layer_types;
  j["compress_rates"] = io::JsonValue::object({{kCompressedSparseAttention, c.compress_rate_csa},
                                               {kHeavilyCompressedAttention, c.compress_rate_hca}});
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["swiglu_limit"] = c.swiglu_limit;
  j["sliding_window"] = c.sliding_window;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["q_lora_rank"] = c.q_lora_rank;
  j["n_shared_experts"] = c.n_shared_experts;
  j["scoring_func"] = c.scoring_func;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["partial_rotary_factor"] = double(c.qk_rope_head_dim) / double(c.head_dim);
  auto rope = [](const RopeScaling& r, double theta, double partial) {
    io::JsonValue s;
    s["rope_type"] = r.type;
    s["rope_theta"] = theta;
    s["partial_rotary_factor"] = partial;
    if (r.type != "default") {
      s["factor"] = r.factor;
      if (r.original_max_position_embeddings > 0)
        s["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    if (r.type == "yarn") {
      if (r.attention_factor) s["attention_factor"] = *r.attention_factor;
      s["beta_fast"] = r.beta_fast;
      s["beta_slow"] = r.beta_slow;
    }
    return s;
  };
  const double partial = double(c.qk_rope_head_dim) / double(c.head_dim);
  j["rope_parameters"] =
      io::JsonValue::object({{"main", rope(c.rope_scaling, c.rope_theta, partial)},
                             {"compress", rope(c.compress_rope, c.compress_rope_theta, partial)}});
  return j.dump();
}

std::string deepseek_v4_checkpoint_name(const std::string& fqn) {
  // Whole-name renames first, then segment renames in order (the first match of each rule).
  if (fqn == "lm_head.weight") return "head.weight";
  std::string s = fqn;
  auto replace = [&s](const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    if (at == std::string::npos) return false;
    s.replace(at, from.size(), to);
    return true;
  };
  // The indexer's parts sit under the compressor in memory, beside it on disk.
  const bool moved =
      replace(".self_attn.compressor.indexer.scorer.weights_proj.", ".attn.indexer.weights_proj.") ||
      replace(".self_attn.compressor.indexer.q_b_proj.", ".attn.indexer.wq_b.") ||
      replace(".self_attn.compressor.indexer.", ".attn.indexer.compressor.");
  (void)moved;  // at most one of the three applies
  replace(".self_attn.", ".attn.");
  replace(".mlp.", ".ffn.");
  replace(".input_layernorm.", ".attn_norm.");
  replace(".post_attention_layernorm.", ".ffn_norm.");
  for (const char* hc : {"attn", "ffn"})
    for (const char* p : {"fn", "base", "scale"})
      replace(std::string(".") + hc + "_hc." + p, std::string(".hc_") + hc + "_" + p);
  replace(".attn.sinks", ".attn.attn_sink");
  replace(".position_bias", ".ape");
  replace(".kv_norm.", ".norm.");
  replace(".q_a_norm.", ".q_norm.");
  replace(".q_a_proj.", ".wq_a.");
  replace(".attn.q_b_proj.", ".attn.wq_b.");
  replace(".kv_proj.", ".wkv.");
  replace(".o_a_proj.", ".wo_a.");
  replace(".o_b_proj.", ".wo_b.");
  replace(".gate.e_score_correction_bias", ".gate.bias");
  // Experts and shared experts: gate w1, down w2, up w3; the compressors' gate_proj is wgate.
  if (s.find("experts.") != std::string::npos) {
    replace(".gate_proj.", ".w1.") || replace(".down_proj.", ".w2.") || replace(".up_proj.", ".w3.");
  } else {
    replace(".gate_proj.", ".wgate.");
  }
  return s;
}

}  // namespace hp::models
