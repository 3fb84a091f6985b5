// Encoding and decoding through the pipeline of tokenizer_impl.h: added tokens are split off the
// raw text, the rest normalized (then normalized added tokens split off), pre-tokenized and run
// through the model; the post-processor template adds BOS/EOS. Decoding maps ids to tokens and
// runs the decoder chain.
#include "hp/io/tokenizer.h"

#include <array>
#include <filesystem>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"
#include "hp/io/unicode.h"

namespace hp::io {

namespace detail {

namespace {

struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};

  ByteMap() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// The code point ending just before byte `pos` of valid UTF-8 `s`, and where it starts.
std::pair<char32_t, size_t> cp_before(std::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  std::vector<char32_t> cp;
  decode_utf8(s.substr(start, pos - start), cp);
  return {cp.empty() ? 0 : cp[0], start};
}

std::pair<char32_t, size_t> cp_at(std::string_view s, size_t pos) {
  auto b = static_cast<unsigned char>(s[pos]);
  size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  std::vector<char32_t> cp;
  decode_utf8(s.substr(pos, std::min(len, s.size() - pos)), cp);
  return {cp.empty() ? 0 : cp[0], pos + len};
}

// Hugging Face AddedVocabulary::find_matches: leftmost-longest non-overlapping matches, then the
// single_word / lstrip / rstrip rules. Calls emit(piece, token-or-null) for consecutive pieces
// covering `s`.
template <class Emit>
void split_added(const AddedMatcher& m, std::string_view s, Emit&& emit) {
  if (m.empty) {
    if (!s.empty()) emit(s, nullptr);
    return;
  }
  size_t done = 0, pos = 0;
  while (pos < s.size()) {
    const AddedToken* hit = nullptr;
    size_t start = pos;
    for (; start < s.size() && !hit; ++start)
      for (const AddedToken* a : m.by_first_byte[static_cast<unsigned char>(s[start])])
        if (s.compare(start, a->content.size(), a->content) == 0) {
          hit = a;
          break;
        }
    if (!hit) break;
    --start;
    size_t stop = start + hit->content.size();
    pos = stop;  // a match discarded by single_word still consumes its text, as in aho-corasick
    if (hit->single_word) {
      bool word_before = start > 0 && is_word(cp_before(s, start).first);
      bool word_after = stop < s.size() && is_word(cp_at(s, stop).first);
      if (word_before || word_after) continue;
    }
    if (hit->lstrip)
      while (start > done) {
        auto [c, prev] = cp_before(s, start);
        if (!is_space(c)) break;
        start = prev;
      }
    if (hit->rstrip)
      while (stop < s.size()) {
        auto [c, next] = cp_at(s, stop);
        if (!is_space(c)) break;
        stop = next;
      }
    if (done < start) emit(s.substr(done, start - done), nullptr);
    emit(s.substr(start, stop - start), hit);
    done = pos = stop;
  }
  if (done < s.size()) emit(s.substr(done), nullptr);
}

// Pre-tokenizes a piece of text without added tokens, then runs the model on each word.
void encode_plain(const TokenizerImpl& t, std::string_view text, bool at_start,
                  std::vector<int32_t>& ids) {
  if (!t.pre_tokenizer) {
    t.model->tokenize(text, ids);
    return;
  }
  std::vector<Piece> pieces{{std::string(text), at_start}};
  t.pre_tokenizer->split(pieces);
  for (const Piece& p : pieces) t.model->tokenize(p.text, ids);
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
  return byte_map().to_char[b];
}
int byte_from_char(char32_t c) {
  return c < 324 ? byte_map().to_byte[c] : -1;
}
void append_byte_level(std::string& out, std::string_view bytes) {
  for (unsigned char b : bytes) append_utf8(out, byte_map().to_char[b]);
}

}  // namespace detail

Tokenizer Tokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path))
    return Tokenizer(detail::load_tokenizer(read_text_file(path, "tokenizer"), path));
  fs::path json = fs::path(path) / "tokenizer.json";
  if (fs::exists(json)) return from_file(json.string());
  if (fs::exists(fs::path(path) / "tiktoken.model"))
    return Tokenizer(detail::load_tiktoken_dir(path));
  HP_THROW(IoError, "tokenizer", path, ": directory has neither tokenizer.json nor tiktoken.model");
}

bool Tokenizer::in_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  return fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "tiktoken.model");
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string source) {
  return Tokenizer(detail::load_tokenizer(json_text, std::move(source)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const detail::TokenizerImpl& t = *impl_;
  if (size_t bad = detail::find_invalid_utf8(text); bad != std::string_view::npos)
    HP_THROW(ValueError, "tokenizer", t.source, ": encode: input is not valid UTF-8 at byte ", bad);
  std::vector<int32_t> ids;
  // Tokens with normalized=false match the raw text first; the others match the normalized
  // remainder, which then goes through pre-tokenization and BPE.
  std::string normalized;
  bool raw_at_start = false;  // the raw piece being normalized begins the input
  auto on_normalized_piece = [&](std::string_view piece, const detail::AddedToken* a) {
    if (a)
      ids.push_back(a->id);
    else
      detail::encode_plain(t, piece, raw_at_start && piece.data() == normalized.data(), ids);
  };
  auto on_raw_piece = [&](std::string_view piece, const detail::AddedToken* a) {
    if (a) {
      ids.push_back(a->id);
      return;
    }
    raw_at_start = piece.data() == text.data();
    normalized.assign(piece);
    if (t.normalizer) t.normalizer->normalize(normalized);
    detail::split_added(t.normalized_matcher, normalized, on_normalized_piece);
  };
  detail::split_added(t.raw_matcher, text, on_raw_piece);
  if (!add_special_tokens || !t.single_template) return ids;
  std::vector<int32_t> out;
  for (const detail::TemplateItem& item : *t.single_template) {
    const std::vector<int32_t>& src = item.is_sequence ? ids : item.ids;
    out.insert(out.end(), src.begin(), src.end());
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const detail::TokenizerImpl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* tok = nullptr;
    if (auto it = t.added_by_id.find(id); it != t.added_by_id.end())
      tok = &t.added[it->second].content;
    else
      tok = t.model->id_to_token(id);
    if (!tok) continue;
    // As the reference, skipping goes by the token's text, whichever id produced it.
    if (skip_special_tokens) {
      auto a = t.added_by_content.find(*tok);
      if (a != t.added_by_content.end() && t.added[t.added_by_id.at(a->second)].special) continue;
    }
    tokens.push_back(*tok);
  }
  std::string out;
  if (!t.decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  t.decoder->decode_chain(tokens);
  for (const std::string& s : tokens) out += s;
  return out;
}

int32_t Tokenizer::vocab_size() const {
  int32_t n = impl_->model->size();
  for (const detail::AddedToken& a : impl_->added) n = std::max(n, a.id + 1);
  return n;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end())
    return impl_->added[it->second].content;
  if (const std::string* s = impl_->model->id_to_token(id)) return *s;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

}  // namespace hp::io
