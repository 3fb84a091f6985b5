// tokenizer.json "normalizer": NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip,
// ByteLevel and Sequence, as the `tokenizers` package applies them.
#include <vector>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/regex.h"
#include "hp/io/tokenizer_impl.h"
#include "hp/io/unicode.h"

namespace hp::io::detail {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  UnicodeForm(bool compat, bool compose) : compat_(compat), compose_(compose) {}
  void normalize(std::string& text) const override {
    text = normalize_unicode(text, compat_, compose_);
  }

 private:
  bool compat_, compose_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = lowercase(text); }
};

// Prepends a string to non-empty text (Llama-2's "▁").
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string s) : s_(std::move(s)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, s_);
  }

 private:
  std::string s_;
};

// Every match of a pattern (a String or a Regex) replaced by `content`.
class Replace final : public Normalizer {
 public:
  Replace(Regex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { re_.replace_all(text, content_); }

 private:
  Regex re_;
  std::string content_;
};

// Removes leading / trailing whitespace (char::is_whitespace: White_Space).
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::vector<char32_t> cps;
    std::vector<uint32_t> offsets;
    decode_utf8(text, cps, &offsets);
    size_t b = 0, e = cps.size();
    if (left_)
      while (b < e && is_space(cps[b])) ++b;
    if (right_)
      while (e > b && is_space(cps[e - 1])) --e;
    text = text.substr(offsets[b], offsets[e] - offsets[b]);
  }

 private:
  bool left_, right_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    append_byte_level(out, text);
    text = std::move(out);
  }
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

// The "pattern" of Replace / Split: {"String": s} or {"Regex": r}.
Regex load_pattern(const Json& node) {
  if (auto s = node.find("String")) return Regex(regex_escape(s->as_string()));
  auto re = node.find("Regex");
  if (!re) node.fail("pattern must be {\"String\": ...} or {\"Regex\": ...}, got " + node.dump());
  try {
    return Regex(re->as_string());
  } catch (const ValueError& e) {
    re->fail(e.what());
  }
}

std::unique_ptr<Normalizer> load_normalizer(const Json& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.get_string("type");
  if (type == "NFC") return std::make_unique<UnicodeForm>(false, true);
  if (type == "NFD") return std::make_unique<UnicodeForm>(false, false);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(true, true);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(true, false);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(node.get_string("prepend"));
  if (type == "Replace")
    return std::make_unique<Replace>(load_pattern(node.at("pattern")), node.get_string("content"));
  if (type == "Strip")
    return std::make_unique<Strip>(node.get_bool_or("strip_left", true),
                                   node.get_bool_or("strip_right", true));
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& n : node.at("normalizers").elements())
      if (auto step = load_normalizer(n)) steps.push_back(std::move(step));
    return std::make_unique<Sequence>(std::move(steps));
  }
  node.at("type").fail("unsupported normalizer type \"" + type +
                       "\" (hp implements NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, "
                       "Strip, ByteLevel, Sequence)");
}

}  // namespace hp::io::detail
