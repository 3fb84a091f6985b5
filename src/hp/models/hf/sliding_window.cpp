// Sliding-window attention of the Llama family (Mistral, Qwen2, Qwen3): the config.json keys as
// transformers reads them, their export, and the window each layer runs with
// (models/transformer.h).
//
// Mistral: `sliding_window` (absent: 4096, MistralConfig's default; null: none) on every layer.
// Qwen2 / Qwen3: the window is `sliding_window` (absent: 4096) only when `use_sliding_window` is
// true, and applies to the layers `layer_types` marks "sliding_attention"; without layer_types,
// to layers >= `max_window_layers` (absent: 28), as Qwen2Config / Qwen3Config derive it. Without
// the window, layer_types is not read (nothing slides).
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/models/hf/registry.h"

namespace hp::models {

namespace {

constexpr const char* kFull = "full_attention";
constexpr const char* kSliding = "sliding_attention";

[[noreturn]] void fail(const io::Json& j, const std::string& key, const std::string& what) {
  HP_THROW(IoError, "config", j.file(), ": ", key, ": ", what);
}

// sliding_window: absent → 4096, null → 0 (none), else > 0.
int64_t window_key(const io::Json& j) {
  if (!j.contains("sliding_window")) return 4096;
  if (j.at("sliding_window").is_null()) return 0;
  const int64_t w = j.at("sliding_window").as_int();
  if (w <= 0) fail(j, "sliding_window", "must be > 0 or null, got " + std::to_string(w));
  return w;
}

}  // namespace

void parse_mistral_sliding_window(const io::Json& j, ModelConfig& c) {
  c.sliding_window = window_key(j);
}

void parse_qwen_sliding_window(const io::Json& j, ModelConfig& c) {
  const bool use = j.get_bool_or("use_sliding_window", false);
  const int64_t window = window_key(j);
  c.sliding_window = use ? window : 0;
  const int64_t n = c.num_hidden_layers;
  c.layer_types.clear();
  // Without a window no layer slides, whatever layer_types says (transformers writes the list,
  // all "full_attention", into every config.json); a layer count over kMaxLayers is rejected by
  // the size checks that follow, before any per-layer list is built.
  if (c.sliding_window <= 0 || n > kMaxLayers) return;
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const io::Json v = j.at("layer_types");
    if (!v.is_array()) fail(j, "layer_types", "must be a list, got " + v.dump());
    for (const io::Json& e : v.elements()) c.layer_types.push_back(e.as_string());
    if (static_cast<int64_t>(c.layer_types.size()) != n)
      fail(j, "layer_types",
           "has " + std::to_string(c.layer_types.size()) + " entries but num_hidden_layers is " +
               std::to_string(n));
    for (size_t i = 0; i < c.layer_types.size(); ++i)
      if (c.layer_types[i] != kFull && c.layer_types[i] != kSliding)
        fail(j, "layer_types[" + std::to_string(i) + "]",
             "unknown layer type '" + c.layer_types[i] + "' (" + kFull + ", " + kSliding + ")");
    return;
  }
  const int64_t first = j.get_int_or("max_window_layers", 28);
  for (int64_t i = 0; i < n; ++i)
    c.layer_types.push_back(c.sliding_window > 0 && i >= first ? kSliding : kFull);
}

std::string mistral_sliding_window_json(const ModelConfig& c) {
  io::JsonValue j;
  j["sliding_window"] = c.sliding_window > 0 ? io::JsonValue(c.sliding_window) : nullptr;
  return j.dump();
}

std::string qwen_sliding_window_json(const ModelConfig& c) {
  io::JsonValue j;
  j["use_sliding_window"] = c.sliding_window > 0;
  j["sliding_window"] = c.sliding_window > 0 ? io::JsonValue(c.sliding_window) : nullptr;
  // layer_types decides which layers slide (max_window_layers only matters without it).
  if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
  return j.dump();
}

int64_t layer_sliding_window(const ModelConfig& c, int64_t layer) {
  if (c.sliding_window <= 0) return 0;
  if (c.layer_types.empty()) return c.sliding_window;
  return c.layer_types.at(static_cast<size_t>(layer)) == kSliding ? c.sliding_window : 0;
}

}  // namespace hp::models
