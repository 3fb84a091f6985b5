#include "hp/data/encoder.h"

#include "hp/core/error.h"

namespace hp::data {

namespace {

io::Tokenizer load_tokenizer(const std::string& path) {
  try {
    return io::Tokenizer::from_file(path);
  } catch (const Error& e) {
    HP_THROW(IoError, "data", "cannot load tokenizer '", path, "': ", e.what());
  }
}

int32_t resolve_separator(const io::Tokenizer& tok, const std::string& path,
                          const std::string& separator_token) {
  if (!separator_token.empty()) {
    auto id = tok.token_to_id(separator_token);
    if (!id)
      HP_THROW(ValueError, "data", "separator_token '", separator_token,
               "' is not a token of tokenizer '", path, "'");
    return *id;
  }
  std::string tried;
  for (const char* name : kAutoSeparatorTokens) {
    if (auto id = tok.token_to_id(name)) return *id;
    tried += tried.empty() ? name : std::string(", ") + name;
  }
  HP_THROW(ValueError, "data", "tokenizer '", path, "' has none of the separator tokens ", tried,
           "; set separator_token");
}

}  // namespace

DocumentEncoder::DocumentEncoder(const std::string& tokenizer, const std::string& separator_token)
    : tokenizer_path_(tokenizer) {
  if (tokenizer.empty()) {
    if (!separator_token.empty())
      HP_THROW(ValueError, "data", "separator_token '", separator_token,
               "' needs a tokenizer.json; byte-level text separates documents with id ",
               kByteSeparator);
    return;
  }
  tokenizer_ = load_tokenizer(tokenizer);
  vocab_size_ = tokenizer_->vocab_size();
  separator_id_ = resolve_separator(*tokenizer_, tokenizer, separator_token);
}

void DocumentEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (tokenizer_) {
    std::vector<int32_t> ids = tokenizer_->encode(text, /*add_special_tokens=*/false);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  const size_t at = out.size();
  out.resize(at + text.size());
  for (size_t i = 0; i < text.size(); ++i)
    out[at + i] = static_cast<int32_t>(static_cast<uint8_t>(text[i]));
}

std::string DocumentEncoder::decode(std::span<const int32_t> ids) const {
  if (tokenizer_) return tokenizer_->decode(ids, /*skip_special_tokens=*/false);
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= kByteVocab)
      HP_THROW(ValueError, "data", "decode: id ", id, " is outside the byte-level vocabulary [0, ",
               kByteVocab, ")");
    text.push_back(id == kByteSeparator ? '\n' : static_cast<char>(static_cast<uint8_t>(id)));
  }
  return text;
}

std::string DocumentEncoder::describe() const {
  return tokenizer_ ? "tokenizer '" + tokenizer_path_ + "'"
                    : std::string("the byte-level vocabulary (no tokenizer)");
}

}  // namespace hp::data
