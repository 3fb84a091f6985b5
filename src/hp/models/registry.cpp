#include "hp/models/registry.h"

#include <map>

#include "hp/models/weights.h"

namespace hp::models {

LayerFactory llama_layers() {
  return {[](const ModelConfig& c, int64_t) {
            return std::make_shared<Attention>(c, c.attention_bias, c.attention_bias, false);
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, c.mlp_bias);
          }};
}

LayerFactory qwen2_layers() {
  // Qwen2 always has q/k/v bias and never an o_proj or MLP bias.
  return {[](const ModelConfig& c, int64_t) {
            return std::make_shared<Attention>(c, true, false, false);
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
          }};
}

LayerFactory qwen3_layers() {
  return {[](const ModelConfig& c, int64_t) {
            return std::make_shared<Attention>(c, c.attention_bias, c.attention_bias, true);
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
          }};
}

namespace {

// Extension point: add {"Qwen3MoeForCausalLM", qwen3_moe_layers()} etc. here.
std::map<std::string, LayerFactory> builtin_architectures() {
  return {
      {"LlamaForCausalLM", llama_layers()},
      {"Qwen2ForCausalLM", qwen2_layers()},
      {"Qwen3ForCausalLM", qwen3_layers()},
  };
}

std::map<std::string, LayerFactory>& table() {
  static std::map<std::string, LayerFactory> t = builtin_architectures();
  return t;
}

}  // namespace

void register_architecture(const std::string& name, LayerFactory factory) {
  table()[name] = std::move(factory);
}

std::vector<std::string> registered_architectures() {
  std::vector<std::string> out;
  for (const auto& [name, f] : table()) out.push_back(name);
  return out;
}

const LayerFactory& architecture(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) {
    std::string known;
    for (const auto& n : registered_architectures()) known += (known.empty() ? "" : ", ") + n;
    HP_THROW(ValueError, "models", "architecture '", name, "' is not implemented (", known, ")");
  }
  return it->second;
}

std::shared_ptr<CausalLM> build_model(const ModelConfig& config) {
  return std::make_shared<CausalLM>(config, architecture(config.architecture));
}

std::shared_ptr<CausalLM> load_model(const std::string& dir) {
  return load_model(dir, read_model_config(dir).dtype);
}

std::shared_ptr<CausalLM> load_model(const std::string& dir, DType dtype) {
  ModelConfig c = read_model_config(dir);
  c.dtype = dtype;
  std::shared_ptr<CausalLM> m;
  {
    // Every parameter is overwritten by load_weights (which fails on any missing one).
    nn::SkipInitGuard skip;
    m = build_model(c);
  }
  load_weights(*m, dir);
  return m;
}

}  // namespace hp::models
