#include "hp/models/hf/weights.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "hp/autograd/grad_mode.h"
#include "hp/io/json.h"
#include "hp/io/safetensors.h"
#include "hp/models/hf/registry.h"
#include "hp/mx/fp8_blocks.h"

namespace hp::models {

namespace fs = std::filesystem;

namespace {

bool ignorable(const std::string& name, bool tied) {
  if (tied && name == "lm_head.weight") return true;
  return name.size() >= 9 && name.compare(name.size() - 9, 9, ".inv_freq") == 0;
}

std::string list_some(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 3; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 3) s += " and " + std::to_string(names.size() - 3) + " more";
  return s;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) HP_THROW(IoError, "models", p.string(), ": cannot write");
}

// The i of "model.layers.<i>.…", or -1 (also for an index too long to be a real one: 19+ digits
// are reported as the layer count int64 cannot hold).
int64_t layer_index(const std::string& name, std::string* rest) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == prefix.size() || end >= name.size() || name[end] != '.') return -1;
  if (end - prefix.size() > 18) return INT64_MAX;
  *rest = name.substr(end + 1);
  return std::stoll(name.substr(prefix.size(), end - prefix.size()));
}

// Whether `rest` (a layer tensor name after "model.layers.<i>.") is "<prefix><expert>.<leaf>".
bool expert_weight(const std::string& rest, const std::string& prefix, const std::string& leaf) {
  if (rest.rfind(prefix, 0) != 0) return false;
  const size_t dot = rest.find('.', prefix.size());
  return dot != std::string::npos && rest.compare(dot + 1, std::string::npos, leaf) == 0;
}

// Whether layer index `i` is one of DeepSeek-V3's next-token-prediction layers
// (model.layers.<num_hidden_layers + k>.*, k < num_nextn_predict_layers).
bool mtp_layer(const ModelConfig& c, int64_t i) {
  return i >= c.num_hidden_layers && i - c.num_hidden_layers < c.num_nextn_predict_layers;
}

// The file of `ckpt` that holds tensor `name` (for error messages).
std::string file_of(const io::SafetensorsCheckpoint& ckpt, const std::string& name) {
  for (const auto& f : ckpt.files())
    if (f.contains(name)) return f.path();
  return name;
}

// Dequantizes the FP8 block-quantized weight `name` of `ckpt` (mx/fp8_blocks.h) into `p`,
// checking its scale tensor: present, floating, [ceil(R / rows), ceil(C / cols)].
void load_fp8_block_weight(const io::SafetensorsCheckpoint& ckpt, const std::string& name,
                           const ModelConfig& c, const Tensor& p) {
  const io::SafetensorsTensor& t = ckpt.tensor(name);
  const std::string file = file_of(ckpt, name);
  if (!c.fp8_blocks)
    HP_THROW(IoError, "models", file, ": tensor '", name, "' is ",
             io::safetensors_dtype_name(t.dtype), " but ", c.file,
             " has no quantization_config (hp reads FP8 weights with block scales: quant_method "
             "fp8, fmt e4m3)");
  const mx::Fp8BlockSize b = *c.fp8_blocks;
  if (t.dtype != DType::f8e4m3)
    HP_THROW(IoError, "models", file, ": tensor '", name, "' is ",
             io::safetensors_dtype_name(t.dtype), " but ", c.file,
             " says quantization_config.fmt = e4m3");
  if (t.shape.size() != 2)
    HP_THROW(IoError, "models", file, ": FP8 tensor '", name, "' has shape ", shape_str(t.shape),
             " (block-quantized weights are 2-D)");
  const std::string scale_name = mx::fp8_block_scale_name(name);
  if (!ckpt.contains(scale_name))
    HP_THROW(IoError, "models", file, ": FP8 weight '", name, "' ", shape_str(t.shape),
             " has no scale tensor '", scale_name, "'");
  const io::SafetensorsTensor& s = ckpt.tensor(scale_name);
  const std::vector<int64_t> want = mx::fp8_block_scale_shape(t.shape[0], t.shape[1], b);
  if (s.shape != want || !is_floating(s.dtype) || dtype_size(s.dtype) < 2)
    HP_THROW(IoError, "models", file_of(ckpt, scale_name), ": scale tensor '", scale_name, "' is ",
             io::safetensors_dtype_name(s.dtype), " ", shape_str(s.shape), ", expected ",
             "F32 (or BF16/F16) ", shape_str(want), " for weight '", name, "' ", shape_str(t.shape),
             " with quantization_config.weight_block_size [", b.rows, ", ", b.cols, "]");
  const Tensor scale =
      from_blob(const_cast<std::byte*>(s.data), s.shape, s.dtype, nullptr).to(DType::f32);
  Tensor w = empty(t.shape, DType::f32);  // [R, C] dequantized
  mx::fp8_block_dequantize(reinterpret_cast<const uint8_t*>(t.data),
                           static_cast<const float*>(scale.raw_data()), t.shape[0], t.shape[1], b,
                           static_cast<float*>(w.raw_data()));
  p.copy_from(w);
}

}  // namespace

void check_config_against_weights(const ModelConfig& c, const std::string& path) {
  const auto ckpt = io::SafetensorsCheckpoint::open(path);
  // Layers: the largest index + 1 (a gap is a missing tensor, which load_weights names).
  int64_t layers = 0;
  std::string example, rest;
  for (const auto& name : ckpt.names())
    if (const int64_t i = layer_index(name, &rest); i >= 0 && i >= layers && !mtp_layer(c, i)) {
      layers = i == INT64_MAX ? i : i + 1;
      example = name;
    }
  if (layers != c.num_hidden_layers)
    HP_THROW(IoError, "models", c.file, ": num_hidden_layers = ", c.num_hidden_layers,
             " does not match the weights: ", path, " holds ", layers, " layer(s)",
             example.empty() ? std::string(" (no model.layers.<i>.* tensor)")
                             : " (last: '" + example + "')");
  const Architecture* arch = find_architecture(c.architecture);
  const bool mla = arch && arch->mla;
  const std::string experts_key = arch && arch->moe() ? arch->experts_key : "num_experts";
  auto product = [](int64_t a, int64_t b) {
    int64_t p = 0;
    return __builtin_mul_overflow(a, b, &p) ? int64_t{-1} : p;
  };
  const std::string heads_key =
      "num_attention_heads × head_dim = " + std::to_string(c.num_attention_heads) + " × " +
      std::to_string(c.head_dim);
  const std::string kv_key =
      "num_key_value_heads × head_dim = " + std::to_string(c.num_key_value_heads) + " × " +
      std::to_string(c.head_dim);
  // dim `d` of tensor `name` must be `want` (config key `key`); absent tensors are load_weights'.
  auto expect = [&](const std::string& name, const Shape& shape, size_t d, int64_t want,
                    const std::string& key) {
    if (d < shape.size() && shape[d] == want) return;
    HP_THROW(IoError, "models", c.file, ": ", key, " = ", want,
             " does not match the weights: ", path, ": tensor '", name, "' has shape ",
             shape_str(shape),
             d < shape.size() ? " (dim " + std::to_string(d) + ")" : std::string());
  };
  for (const auto& name : ckpt.names()) {
    const Shape shape = ckpt.tensor(name).shape;
    if (name == "model.embed_tokens.weight" ||
        (name == "lm_head.weight" && !c.tie_word_embeddings)) {
      expect(name, shape, 0, c.vocab_size, "vocab_size");
      expect(name, shape, 1, c.hidden_size, "hidden_size");
    } else if (name == "model.norm.weight") {
      expect(name, shape, 0, c.hidden_size, "hidden_size");
    } else if (layer_index(name, &rest) >= 0) {
      if (rest == "input_layernorm.weight") {
        expect(name, shape, 0, c.hidden_size, "hidden_size");
      } else if (rest == "mlp.gate_proj.weight") {
        expect(name, shape, 0, c.intermediate_size, "intermediate_size");
        expect(name, shape, 1, c.hidden_size, "hidden_size");
      } else if (!mla && rest == "self_attn.q_proj.weight") {
        expect(name, shape, 0, product(c.num_attention_heads, c.head_dim), heads_key);
        expect(name, shape, 1, c.hidden_size, "hidden_size");
      } else if (!mla && rest == "self_attn.k_proj.weight") {
        expect(name, shape, 0, product(c.num_key_value_heads, c.head_dim), kv_key);
      } else if (c.is_moe() &&
                 (rest == "mlp.gate.weight" || rest == "block_sparse_moe.gate.weight")) {
        expect(name, shape, 0, c.num_experts, experts_key);
      } else if (c.is_moe() && expert_weight(rest, "mlp.experts.", "gate_proj.weight")) {
        expect(name, shape, 0, c.moe_intermediate_size, "moe_intermediate_size");
        expect(name, shape, 1, c.hidden_size, "hidden_size");
      } else if (c.is_moe() && rest == "mlp.shared_experts.gate_proj.weight") {
        expect(name, shape, 0, product(c.moe_intermediate_size, c.n_shared_experts),
               "moe_intermediate_size × n_shared_experts = " +
                   std::to_string(c.moe_intermediate_size) + " × " +
                   std::to_string(c.n_shared_experts));
      } else if (c.is_moe() && expert_weight(rest, "block_sparse_moe.experts.", "w1.weight")) {
        // Mixtral's experts are intermediate_size wide (it has no dense MLP to check it on).
        expect(name, shape, 0, c.intermediate_size, "intermediate_size");
        expect(name, shape, 1, c.hidden_size, "hidden_size");
      }
    }
  }
}

void load_weights(nn::Module& model, const std::string& path, const ModelConfig* config,
                  const std::function<std::string(const std::string&)>& checkpoint_name) {
  const ModelConfig plain;
  const ModelConfig& c = config ? *config : plain;
  const auto ckpt = io::SafetensorsCheckpoint::open(path);
  auto params = model.named_parameters();
  if (checkpoint_name)
    for (auto& [name, p] : params) name = checkpoint_name(name);
  bool tied = true;
  std::set<std::string> wanted;
  for (const auto& [name, p] : params) {
    wanted.insert(name);
    if (name == "lm_head.weight") tied = false;
  }
  std::vector<std::string> missing, unexpected, mtp;
  for (const auto& [name, p] : params)
    if (!ckpt.contains(name)) missing.push_back(name);
  // A block-scaled FP8 weight's scale (checked when the weight is loaded).
  const std::string scale_suffix = mx::fp8_block_scale_name("");
  auto fp8_scale = [&](const std::string& name) {
    const size_t n = scale_suffix.size();
    return c.fp8_blocks && name.size() > n && name.compare(name.size() - n, n, scale_suffix) == 0 &&
           wanted.count(name.substr(0, name.size() - n));
  };
  std::string rest;
  for (const auto& name : ckpt.names()) {
    if (wanted.count(name) || ignorable(name, tied) || fp8_scale(name)) continue;
    if (config && mtp_layer(c, layer_index(name, &rest)))
      mtp.push_back(name);
    else
      unexpected.push_back(name);
  }
  if (!missing.empty()) HP_THROW(IoError, "models", path, ": missing tensor ", list_some(missing));
  if (!unexpected.empty())
    HP_THROW(IoError, "models", path, ": unexpected tensor ", list_some(unexpected),
             " (not a parameter of the model)");
  if (!mtp.empty())
    std::fprintf(stderr,
                 "[models] %s: skipping %zu tensor(s) of the next-token-prediction (MTP) layer(s) "
                 "model.layers.%lld.* (num_nextn_predict_layers = %lld): hp has no MTP module\n",
                 path.c_str(), mtp.size(), static_cast<long long>(c.num_hidden_layers),
                 static_cast<long long>(c.num_nextn_predict_layers));
  autograd::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    const io::SafetensorsTensor& t = ckpt.tensor(name);
    if (Shape(t.shape) != p.shape())
      HP_THROW(IoError, "models", path, ": tensor '", name, "' has shape ", shape_str(t.shape),
               " in the checkpoint but ", shape_str(p.shape()), " in the model");
    if (t.dtype == DType::f8e4m3 || t.dtype == DType::f8e5m2) {
      load_fp8_block_weight(ckpt, name, c, p);
      continue;
    }
    // Zero-copy view of the mapped bytes (ckpt keeps them mapped for this loop); copy_from
    // converts to the parameter's dtype.
    const Tensor src = from_blob(const_cast<std::byte*>(t.data), t.shape, t.dtype, nullptr);
    p.copy_from(src);
  }
}

std::function<std::string(const std::string&)> checkpoint_names(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  if (!fs::exists(file)) return nullptr;
  // Only the class is read: the files beside a checkpoint need not be a complete config.
  const io::Json j = io::read_json_file(file.string());
  const auto a = j.is_object() ? j.find("architectures") : std::nullopt;
  if (!a || !a->is_array() || a->size() == 0 || !a->at(0).is_string()) return nullptr;
  const Architecture* arch = find_architecture(a->at(0).as_string());
  return arch ? arch->checkpoint_name : nullptr;
}

void save_pretrained(const CausalLM& model, const std::string& out_dir, int64_t max_shard_bytes,
                     const std::string& tokenizer_dir) {
  if (max_shard_bytes <= 0)
    HP_THROW(ValueError, "models", "max_shard_bytes must be > 0, got ", max_shard_bytes);
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) HP_THROW(IoError, "models", out_dir, ": cannot create directory: ", ec.message());
  write_text(dir / "config.json", model_config_to_json(model.config()));
  const Architecture* arch = find_architecture(model.config().architecture);
  std::function<std::string(const std::string&)> checkpoint_name;
  if (arch) checkpoint_name = arch->checkpoint_name;

  // Greedy sharding in parameter order, as transformers does.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t cur = 0, total = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto bytes = static_cast<int64_t>(p.nbytes());
    if (cur > 0 && cur + bytes > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().emplace_back(checkpoint_name ? checkpoint_name(name) : name, p.contiguous());
    cur += bytes;
    total += bytes;
  }
  const size_t n = shards.size();
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (size_t i = 0; i < n; ++i) {
    const std::string file = io::hf_shard_file(i, n);
    std::vector<io::SafetensorsEntry> entries;
    for (const auto& [name, t] : shards[i]) {
      entries.push_back({name, t.dtype(), t.shape(), t.raw_data(), t.nbytes()});
      weight_map.emplace_back(name, file);
    }
    io::write_safetensors((dir / file).string(), entries, {{"format", "pt"}});
  }
  if (n > 1) write_text(dir / "model.safetensors.index.json", io::hf_index_json(weight_map, total));
  if (!tokenizer_dir.empty()) {
    for (const char* f : {"tokenizer.json", "tiktoken.model", "tokenizer_config.json",
                          "special_tokens_map.json", "generation_config.json"}) {
      const fs::path src = fs::path(tokenizer_dir) / f;
      if (!fs::exists(src)) continue;
      fs::copy_file(src, dir / f, fs::copy_options::overwrite_existing, ec);
      if (ec) HP_THROW(IoError, "models", src.string(), ": cannot copy: ", ec.message());
    }
  }
}

}  // namespace hp::models
