// tokenizer.json "decoder": ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and
// Sequence, each the `tokenizers` package's decode_chain.
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"
#include "hp/io/unicode.h"

namespace hp::io::detail {

namespace {

// All tokens to bytes through the byte-level map (a token with any unmapped character is taken
// verbatim), then one string, invalid UTF-8 becoming U+FFFD.
class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string out;
    std::vector<char32_t> cps;
    for (const std::string& tok : tokens) {
      decode_utf8(tok, cps);
      size_t mark = out.size();
      for (char32_t c : cps) {
        int b = byte_from_char(c);
        if (b < 0) {
          out.replace(mark, std::string::npos, tok);
          break;
        }
        out += static_cast<char>(b);
      }
    }
    tokens.assign(1, utf8_lossy(out));
  }
};

// The replacement character becomes a space; on the first token it is dropped instead (the
// prefix the pre-tokenizer added), unless prepend_scheme is "never".
class Metaspace final : public Decoder {
 public:
  Metaspace(char32_t replacement, bool strip_first)
      : rep_(replacement), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<char32_t> cps;
    for (size_t i = 0; i < tokens.size(); ++i) {
      decode_utf8(tokens[i], cps);
      std::string out;
      for (char32_t c : cps) {
        if (c != rep_)
          append_utf8(out, c);
        else if (i != 0 || !strip_first_)
          out += ' ';
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t rep_;
  bool strip_first_;
};

// Runs of "<0xHH>" tokens become the text of their bytes, or one U+FFFD per byte when those
// bytes are not valid UTF-8.
class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (!count) return;
      if (find_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (std::string& tok : tokens) {
      int b = byte_token(tok);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(tok));
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<char>(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  }
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class Strip final : public Decoder {
 public:
  Strip(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<char32_t> cps;
    std::vector<uint32_t> offsets;
    for (std::string& tok : tokens) {
      decode_utf8(tok, cps, &offsets);
      size_t b = 0, e = cps.size();
      while (b < std::min(start_, cps.size()) && cps[b] == content_) ++b;
      size_t stripped = 0;
      while (e > b && stripped < stop_ && cps[e - 1] == content_) --e, ++stripped;
      tok = tok.substr(offsets[b], offsets[e] - offsets[b]);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  Replace(Regex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& tok : tokens) re_.replace_all(tok, content_);
  }

 private:
  Regex re_;
  std::string content_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

char32_t one_char(const Json& node) {
  std::vector<char32_t> cps;
  std::string s = node.as_string();
  decode_utf8(s, cps);
  if (cps.size() != 1) node.fail("expected one character, got \"" + s + "\"");
  return cps[0];
}

}  // namespace

std::unique_ptr<Decoder> make_byte_level_decoder() {
  return std::make_unique<ByteLevel>();
}

std::unique_ptr<Decoder> load_decoder(const Json& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.get_string("type");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") {
    char32_t rep = 0x2581;
    if (auto r = node.find("replacement"); r && !r->is_null()) rep = one_char(*r);
    bool strip_first = node.get_bool_or("add_prefix_space", true);
    if (auto s = node.find("prepend_scheme"); s && !s->is_null())
      strip_first = s->as_string() != "never";
    return std::make_unique<Metaspace>(rep, strip_first);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    auto count = [&](const char* key) {
      int64_t v = node.get_int(key);
      if (v < 0) node.at(key).fail("expected a count >= 0, got " + std::to_string(v));
      return static_cast<size_t>(v);
    };
    return std::make_unique<Strip>(one_char(node.at("content")), count("start"), count("stop"));
  }
  if (type == "Replace")
    return std::make_unique<Replace>(load_pattern(node.at("pattern")), node.get_string("content"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& n : node.at("decoders").elements())
      if (auto step = load_decoder(n)) steps.push_back(std::move(step));
    return std::make_unique<Sequence>(std::move(steps));
  }
  node.at("type").fail("unsupported decoder type \"" + type +
                       "\" (hp implements ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
                       "Replace, Sequence)");
}

}  // namespace hp::io::detail
