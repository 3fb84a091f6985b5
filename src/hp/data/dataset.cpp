#include "hp/data/dataset.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <string_view>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/data/files.h"

namespace hp::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read without byte swapping");

namespace {

// Documents are encoded in batches of consecutive documents holding at least this many bytes, so
// the batch boundaries (and with them the stream) depend only on the corpus, not the thread count.
constexpr size_t kBatchBytes = size_t{1} << 18;

struct Document {
  std::string_view text;
  size_t file;  // index into the file list
};

// Non-empty pieces of `text` between occurrences of `sep` (the whole text if sep is "").
void split_documents(std::string_view text, std::string_view sep, size_t file,
                     std::vector<Document>& out) {
  if (sep.empty()) {
    if (!text.empty()) out.push_back({text, file});
    return;
  }
  size_t begin = 0;
  for (;;) {
    size_t at = text.find(sep, begin);
    size_t end = at == std::string_view::npos ? text.size() : at;
    if (end > begin) out.push_back({text.substr(begin, end - begin), file});
    if (at == std::string_view::npos) return;
    begin = at + sep.size();
  }
}

// Batch b covers documents [starts[b], starts[b + 1]).
std::vector<size_t> batch_starts(const std::vector<Document>& docs) {
  std::vector<size_t> starts{0};
  size_t bytes = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    bytes += docs[i].text.size();
    if (bytes >= kBatchBytes && i + 1 < docs.size()) {
      starts.push_back(i + 1);
      bytes = 0;
    }
  }
  starts.push_back(docs.size());
  return starts;
}

io::Tokenizer load_tokenizer(const std::string& path) {
  try {
    return io::Tokenizer::from_file(path);
  } catch (const Error& e) {
    HP_THROW(IoError, "data", "cannot load tokenizer '", path, "': ", e.what());
  }
}

int32_t resolve_separator(const io::Tokenizer& tok, const DatasetOptions& o) {
  if (!o.separator_token.empty()) {
    auto id = tok.token_to_id(o.separator_token);
    if (!id)
      HP_THROW(ValueError, "data", "separator_token '", o.separator_token,
               "' is not a token of tokenizer '", o.tokenizer, "'");
    return *id;
  }
  std::string tried;
  for (const char* name : kAutoSeparatorTokens) {
    if (auto id = tok.token_to_id(name)) return *id;
    tried += tried.empty() ? name : std::string(", ") + name;
  }
  HP_THROW(ValueError, "data", "tokenizer '", o.tokenizer, "' has none of the separator tokens ",
           tried, "; set separator_token");
}

}  // namespace

std::shared_ptr<const TokenDataset> TokenDataset::load(const DatasetOptions& o) {
  std::shared_ptr<TokenDataset> ds(new TokenDataset());
  ds->options_ = o;
  int elem_size = 0;
  if (o.format == "tokens_u16") {
    elem_size = 2;
  } else if (o.format == "tokens_u32") {
    elem_size = 4;
  } else if (o.format != "text") {
    HP_THROW(ValueError, "data", "unknown dataset format '", o.format, "' for '", o.path,
             "' (text | tokens_u16 | tokens_u32)");
  }
  if (elem_size != 0) {
    for (const auto& [key, value] : {std::pair{"tokenizer", &o.tokenizer},
                                     {"doc_separator", &o.doc_separator},
                                     {"separator_token", &o.separator_token}}) {
      if (!value->empty())
        HP_THROW(ValueError, "data", key, " '", *value, "' applies to text datasets only; '",
                 o.path, "' has format ", o.format);
    }
  }
  ds->files_ = detail::list_files(o.path);
  if (elem_size == 0) {
    ds->load_text();
  } else {
    ds->load_token_files(elem_size);
  }
  return ds;
}

void TokenDataset::load_text() {
  if (options_.tokenizer.empty()) {
    if (!options_.separator_token.empty())
      HP_THROW(ValueError, "data", "separator_token '", options_.separator_token,
               "' needs a tokenizer.json; byte-level text separates documents with id ",
               kByteSeparator);
    vocab_size_ = kByteVocab;
    separator_id_ = kByteSeparator;
  } else {
    tokenizer_ = load_tokenizer(options_.tokenizer);
    vocab_size_ = tokenizer_->vocab_size();
    separator_id_ = resolve_separator(*tokenizer_, options_);
  }

  // One text per file, all read before splitting: documents view into them.
  std::vector<std::string> texts;
  for (const std::string& path : files_) texts.push_back(detail::read_file(path));
  std::vector<Document> docs;
  for (size_t f = 0; f < files_.size(); ++f)
    split_documents(texts[f], options_.doc_separator, f, docs);
  num_documents_ = static_cast<int64_t>(docs.size());

  // Each batch encodes its documents (each followed by the separator) into its own buffer; a
  // failure is kept per batch so the error reported is the first in stream order.
  const std::vector<size_t> starts = batch_starts(docs);
  const int64_t num_batches = static_cast<int64_t>(starts.size()) - 1;
  std::vector<std::vector<int32_t>> parts(num_batches);
  std::vector<std::exception_ptr> errors(num_batches);
  parallel_blocks(num_batches, 1, [&](int64_t b, int64_t, int64_t) {
    for (size_t d = starts[b]; d < starts[b + 1]; ++d) {
      const Document& doc = docs[d];
      try {
        std::vector<int32_t> ids = encode_text(doc.text);
        parts[b].insert(parts[b].end(), ids.begin(), ids.end());
        parts[b].push_back(separator_id_);
      } catch (const Error& e) {
        size_t offset = static_cast<size_t>(doc.text.data() - texts[doc.file].data());
        errors[b] = std::make_exception_ptr(ValueError(hp::detail::cat(
            "[data] '", files_[doc.file], "' document at byte ", offset, ": ", e.what())));
        return;
      }
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  tokens_.reserve(total);
  for (auto& p : parts) {
    tokens_.insert(tokens_.end(), p.begin(), p.end());
    std::vector<int32_t>().swap(p);
  }
}

void TokenDataset::load_token_files(int elem_size) {
  // First pass: sizes (and the size check) before any reading.
  std::vector<size_t> counts;
  size_t total = 0;
  for (const std::string& path : files_) {
    size_t bytes = detail::InputFile(path).size();
    if (bytes % elem_size != 0)
      HP_THROW(IoError, "data", "token file '", path, "' has ", bytes, " bytes, not a multiple of ",
               elem_size, " (format ", options_.format, ")");
    counts.push_back(bytes / elem_size);
    total += bytes / elem_size;
  }
  tokens_.resize(total);
  size_t at = 0;
  std::vector<uint16_t> narrow;
  for (size_t f = 0; f < files_.size(); ++f) {
    detail::InputFile in(files_[f]);
    int32_t* dst = tokens_.data() + at;
    if (elem_size == 4) {
      // u32 ids land in int32 storage as-is; one above INT32_MAX reads as negative.
      in.read_exact(dst, counts[f] * 4);
      const int32_t* bad = std::find_if(dst, dst + counts[f], [](int32_t v) { return v < 0; });
      if (bad != dst + counts[f])
        HP_THROW(IoError, "data", "token file '", files_[f], "': id ", static_cast<uint32_t>(*bad),
                 " at index ", bad - dst, " does not fit int32 (max 2147483647)");
    } else {
      narrow.resize(counts[f]);
      in.read_exact(narrow.data(), counts[f] * 2);
      std::copy(narrow.begin(), narrow.end(), dst);
    }
    at += counts[f];
  }
  num_documents_ = static_cast<int64_t>(files_.size());
  int32_t max_id = tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
  vocab_size_ = int64_t{max_id} + 1;
}

std::vector<int32_t> TokenDataset::encode(const std::string& text) const {
  if (options_.format != "text")
    HP_THROW(ValueError, "data", "encode needs a text dataset; '", options_.path, "' has format ",
             options_.format);
  return encode_text(text);
}

std::vector<int32_t> TokenDataset::encode_text(std::string_view text) const {
  if (tokenizer_) return tokenizer_->encode(text, /*add_special_tokens=*/false);
  std::vector<int32_t> ids(text.size());
  std::transform(text.begin(), text.end(), ids.begin(),
                 [](char c) { return static_cast<int32_t>(static_cast<uint8_t>(c)); });
  return ids;
}

std::string TokenDataset::decode(const std::vector<int32_t>& ids) const {
  if (options_.format != "text")
    HP_THROW(ValueError, "data", "decode needs a text dataset; '", options_.path, "' has format ",
             options_.format);
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

}  // namespace hp::data
