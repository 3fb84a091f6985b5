// tiktoken tokenizer directories as published for Kimi-K2: tiktoken.model ("<base64 bytes> <rank>"
// per line; the rank is the id) and tokenizer_config.json, whose added_tokens_decoder names the
// special tokens. As tokenization_kimi.py builds it: 256 special ids follow the base vocabulary
// (named by added_tokens_decoder, else "<|reserved_token_N|>"), all recognized inside text; the
// pre-tokenization regex is Kimi's, built in because the directory carries it only in Python code;
// pieces are merged by tiktoken's rule (the adjacent pair whose concatenation has the lowest rank).
//
// Not reproduced: tokenization_kimi.py cuts runs of over 25,000 whitespace or non-whitespace
// characters before encoding (a guard against tiktoken's recursion limit); hp has no such limit.
#include <filesystem>
#include <limits>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"

namespace hp::io::detail {

namespace {

// tokenization_kimi.py's pat_str.
constexpr std::string_view kKimiPattern =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr int kNumReservedSpecial = 256;

class TiktokenModel final : public Model {
 public:
  // `ranks`: raw bytes → rank (= id); every single byte must have one.
  explicit TiktokenModel(TokenMap ranks) : ranks_(std::move(ranks)) {
    int32_t max_id = -1;
    for (const auto& [bytes, id] : ranks_) max_id = std::max(max_id, id);
    mapped_.resize(static_cast<size_t>(max_id + 1));
    has_id_.resize(mapped_.size());
    for (const auto& [bytes, id] : ranks_) {
      append_byte_level(mapped_[id], bytes);
      has_id_[id] = true;
      by_mapped_.emplace(mapped_[id], id);
    }
  }

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override {
    if (piece.empty()) return;
    if (auto it = ranks_.find(piece); it != ranks_.end()) {
      out.push_back(it->second);
      return;
    }
    // tiktoken's _byte_pair_merge: parts[i] is a boundary and the rank of the pair starting there.
    constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
    auto rank_of = [&](size_t b, size_t e) {
      auto it = ranks_.find(piece.substr(b, e - b));
      return it == ranks_.end() ? kNone : it->second;
    };
    std::vector<std::pair<size_t, int32_t>> parts;
    parts.reserve(piece.size() + 1);
    for (size_t i = 0; i + 1 < piece.size(); ++i) parts.emplace_back(i, rank_of(i, i + 2));
    parts.emplace_back(piece.size() - 1, kNone);
    parts.emplace_back(piece.size(), kNone);
    auto pair_rank = [&](size_t i) {
      return i + 3 < parts.size() ? rank_of(parts[i].first, parts[i + 3].first) : kNone;
    };
    for (;;) {
      size_t best = 0;
      int32_t best_rank = kNone;
      for (size_t i = 0; i + 1 < parts.size(); ++i)
        if (parts[i].second < best_rank) best_rank = parts[i].second, best = i;
      if (best_rank == kNone) break;
      if (best > 0) parts[best - 1].second = pair_rank(best - 1);
      parts[best].second = pair_rank(best);
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int32_t r = rank_of(parts[i].first, parts[i + 1].first);
      HP_CHECK(r != kNone, "tiktoken piece part without a rank");
      out.push_back(r);
    }
  }

  // Tokens are spelled in the byte-level alphabet, as tokenization_kimi.py's vocabulary does.
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = by_mapped_.find(token);
    if (it == by_mapped_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= mapped_.size() || !has_id_[id]) return nullptr;
    return &mapped_[id];
  }
  int32_t size() const override { return static_cast<int32_t>(mapped_.size()); }

 private:
  TokenMap ranks_, by_mapped_;
  std::vector<std::string> mapped_;
  std::vector<bool> has_id_;
};

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with '=' padding; nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '=') {
      if (i + 2 < s.size()) return std::nullopt;
      ++pad;
      continue;
    }
    int v = base64_value(s[i]);
    if (v < 0 || pad) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

TokenMap load_ranks(const std::string& path) {
  std::string text = read_text_file(path, "tokenizer");
  TokenMap ranks;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto bad = [&](std::string_view why) {
      HP_THROW(IoError, "tokenizer", path, ":", line_no, ": ", why, " in line \"",
               line.substr(0, 80), "\" (expected \"<base64 token> <rank>\")");
    };
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      bad("not two fields");
    auto bytes = base64_decode(line.substr(0, sp));
    if (!bytes) bad("invalid base64 token");
    std::string_view num = line.substr(sp + 1);
    uint64_t rank = 0;
    if (num.empty() || num.size() > 10) bad("invalid rank");
    for (char c : num) {
      if (c < '0' || c > '9') bad("invalid rank");
      rank = rank * 10 + static_cast<uint64_t>(c - '0');
    }
    if (rank > static_cast<uint64_t>(std::numeric_limits<int32_t>::max() - kNumReservedSpecial))
      bad("rank out of range");
    if (!ranks.emplace(std::move(*bytes), static_cast<int32_t>(rank)).second)
      bad("duplicate token");
  }
  if (ranks.empty()) HP_THROW(IoError, "tokenizer", path, ": no tokens");
  for (int b = 0; b < 256; ++b)
    if (!ranks.count(std::string(1, static_cast<char>(b))))
      HP_THROW(IoError, "tokenizer", path, ": byte 0x", std::hex, b,
               " has no token (tiktoken vocabularies must cover every single byte)");
  return ranks;
}

}  // namespace

std::shared_ptr<const TokenizerImpl> load_tiktoken_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string model_path = (fs::path(dir) / "tiktoken.model").string();
  auto t = std::make_shared<TokenizerImpl>();
  t->source = model_path;
  TokenMap ranks = load_ranks(model_path);
  auto num_base = static_cast<int32_t>(ranks.size());
  t->model = std::make_unique<TiktokenModel>(std::move(ranks));
  t->pre_tokenizer = make_regex_split(std::string(kKimiPattern));
  t->decoder = make_byte_level_decoder();

  // Special names from tokenizer_config.json (optional file).
  std::unordered_map<int32_t, std::string> names;
  std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  bool add_bos = false, add_eos = false;
  std::string bos, eos;
  if (fs::exists(config_path)) {
    Json config = read_json_file(config_path);
    if (auto dec = config.find("added_tokens_decoder"); dec && !dec->is_null()) {
      for (const auto& [key, entry] : dec->items()) {
        char* end = nullptr;
        long id = std::strtol(key.c_str(), &end, 10);
        if (key.empty() || *end || id < 0 || id > std::numeric_limits<int32_t>::max())
          dec->at(key).fail("key \"" + key + "\" is not a token id");
        names[static_cast<int32_t>(id)] = entry.get_string("content");
      }
    }
    add_bos = config.get_bool_or("add_bos_token", false);
    add_eos = config.get_bool_or("add_eos_token", false);
    for (auto [key, out] : {std::pair{"bos_token", &bos}, std::pair{"eos_token", &eos}}) {
      auto n = config.find(key);
      if (!n || n->is_null()) continue;
      *out = n->is_string() ? n->as_string() : n->get_string("content");
    }
  }
  for (int32_t id = num_base; id < num_base + kNumReservedSpecial; ++id) {
    AddedToken a;
    a.id = id;
    auto it = names.find(id);
    a.content = it != names.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>";
    a.special = true;
    t->added.push_back(std::move(a));
  }
  index_added_tokens(*t);
  // add_bos_token / add_eos_token (absent in Kimi's config: nothing is added).
  if (add_bos || add_eos) {
    std::vector<TemplateItem> tmpl;
    auto id_of = [&](const std::string& tok, const char* key) {
      auto it = t->added_by_content.find(tok);
      if (it == t->added_by_content.end())
        HP_THROW(IoError, "tokenizer", config_path, ": ", key, " \"", tok,
                 "\" is not a special token of ", model_path);
      return it->second;
    };
    if (add_bos) tmpl.push_back({false, {id_of(bos, "bos_token")}});
    tmpl.push_back({true, {}});
    if (add_eos) tmpl.push_back({false, {id_of(eos, "eos_token")}});
    t->single_template = std::move(tmpl);
  }
  return t;
}

}  // namespace hp::io::detail
