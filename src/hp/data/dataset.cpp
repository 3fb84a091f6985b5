#include "hp/data/dataset.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <iterator>
#include <string_view>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/data/documents.h"
#include "hp/data/files.h"
#include "hp/data/indexed.h"
#include "hp/data/input.h"

namespace hp::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read without byte swapping");

std::span<const EnumName<DatasetFormat>> enum_names(DatasetFormat) {
  using enum DatasetFormat;
  static constexpr EnumName<DatasetFormat> names[] = {{"text", text},
                                                      {"tokens_u16", tokens_u16},
                                                      {"tokens_u32", tokens_u32},
                                                      {"indexed", indexed},
                                                      {"chat", chat}};
  return names;
}

namespace {

// Documents are encoded in batches of consecutive documents holding at least this many bytes, so
// the batch boundaries (and with them the stream) depend only on the corpus, not the thread count.
constexpr size_t kBatchBytes = size_t{1} << 18;

struct Document {
  std::string_view text;
  size_t file;  // index into the file list
};

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

}  // namespace

std::shared_ptr<const TokenDataset> TokenDataset::load(const DatasetOptions& o) {
  std::shared_ptr<TokenDataset> ds(new TokenDataset());
  ds->options_ = o;
  int elem_size = 0;
  if (o.format == DatasetFormat::tokens_u16)
    elem_size = 2;
  else if (o.format == DatasetFormat::tokens_u32)
    elem_size = 4;
  if (!o.chat_template.empty() && o.format != DatasetFormat::chat)
    HP_THROW(ValueError, "data", "chat_template '", o.chat_template, "' applies to chat datasets ",
             "only; '", o.path, "' has format ", enum_name(o.format));
  if ((o.format == DatasetFormat::indexed || o.format == DatasetFormat::chat) &&
      !o.doc_separator.empty())
    HP_THROW(ValueError, "data", "doc_separator '", o.doc_separator,
             "' applies to text datasets only; '", o.path, "' is ",
             o.format == DatasetFormat::chat
                 ? "a chat dataset, one conversation per JSONL line"
                 : "an indexed dataset, whose documents were split when it was prepared");
  if (elem_size != 0) {
    for (const auto& [key, value] : {std::pair{"tokenizer", &o.tokenizer},
                                     {"doc_separator", &o.doc_separator},
                                     {"separator_token", &o.separator_token}}) {
      if (!value->empty())
        HP_THROW(ValueError, "data", key, " '", *value, "' applies to text datasets only; '",
                 o.path, "' has format ", enum_name(o.format));
    }
  }
  if (o.format == DatasetFormat::indexed) {
    ds->load_indexed();
    return ds;
  }
  ds->files_ = detail::list_files(o.path);
  if (o.format == DatasetFormat::chat) {
    ds->load_chat();
  } else if (elem_size == 0) {
    ds->load_text();
  } else {
    ds->load_token_files(elem_size);
  }
  ds->size_ = static_cast<int64_t>(ds->tokens_.size());
  return ds;
}

TokenDataset::~TokenDataset() = default;

void TokenDataset::load_indexed() {
  encoder_.emplace(options_.tokenizer, options_.separator_token);
  vocab_size_ = encoder_->vocab_size();
  separator_id_ = encoder_->separator_id();
  indexed_ = IndexedDataset::open(options_.path);
  const IndexedDType t = indexed_->dtype();
  if (t == IndexedDType::f32 || t == IndexedDType::f64)
    HP_THROW(IoError, "data", "indexed dataset '", options_.path, "' holds ", indexed_dtype_name(t),
             " elements, not token ids");
  files_ = {indexed_bin_path(options_.path), indexed_idx_path(options_.path)};
  size_ = indexed_->num_tokens();
  num_documents_ = indexed_->num_documents();
}

void TokenDataset::load_text() {
  encoder_.emplace(options_.tokenizer, options_.separator_token);
  vocab_size_ = encoder_->vocab_size();
  separator_id_ = encoder_->separator_id();

  // One text per file (decompressed), all read before splitting: documents view into them.
  std::vector<std::string> texts;
  for (const std::string& path : files_) texts.push_back(detail::read_input(path));
  std::vector<Document> docs;
  for (size_t f = 0; f < files_.size(); ++f)
    detail::split_documents(texts[f], options_.doc_separator, [&](std::string_view text, uint64_t) {
      docs.push_back({text, f});
    });
  num_documents_ = static_cast<int64_t>(docs.size());

  // Each batch encodes its documents (each followed by the separator) into its own buffer; a
  // failure is kept per batch so the error reported is the first in stream order.
  const std::vector<size_t> starts = batch_starts(docs);
  const int64_t num_batches = static_cast<int64_t>(starts.size()) - 1;
  std::vector<std::vector<int32_t>> parts(num_batches);
  std::vector<std::vector<int64_t>> ends(num_batches);  // each document's end within its batch
  std::vector<std::exception_ptr> errors(num_batches);
  parallel_blocks(num_batches, 1, [&](int64_t b, int64_t, int64_t) {
    for (size_t d = starts[b]; d < starts[b + 1]; ++d) {
      const Document& doc = docs[d];
      try {
        encoder_->encode(doc.text, parts[b]);
        parts[b].push_back(separator_id_);
        ends[b].push_back(static_cast<int64_t>(parts[b].size()));
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

  append_batches(parts, ends, nullptr);
}

void TokenDataset::append_batches(std::vector<std::vector<int32_t>>& parts,
                                  const std::vector<std::vector<int64_t>>& ends,
                                  std::vector<std::vector<uint8_t>>* masks) {
  size_t total = 0;
  doc_starts_.assign(1, 0);
  for (size_t b = 0; b < parts.size(); ++b) {
    for (int64_t e : ends[b]) doc_starts_.push_back(static_cast<int64_t>(total) + e);
    total += parts[b].size();
  }
  tokens_.reserve(total);
  if (masks) mask_.reserve(total);
  for (size_t b = 0; b < parts.size(); ++b) {
    tokens_.insert(tokens_.end(), parts[b].begin(), parts[b].end());
    std::vector<int32_t>().swap(parts[b]);
    if (!masks) continue;
    mask_.insert(mask_.end(), (*masks)[b].begin(), (*masks)[b].end());
    std::vector<uint8_t>().swap((*masks)[b]);
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
               elem_size, " (format ", enum_name(options_.format), ")");
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
  doc_starts_.assign(1, 0);
  for (size_t c : counts) doc_starts_.push_back(doc_starts_.back() + static_cast<int64_t>(c));
  int32_t max_id = tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
  vocab_size_ = int64_t{max_id} + 1;
}

template <class F>
void TokenDataset::for_pieces(int64_t begin, int64_t count, F&& f) const {
  // The pieces this range spans, each read from the base stream.
  auto it = std::prev(std::upper_bound(pieces_.begin(), pieces_.end(), begin,
                                       [](int64_t v, const auto& p) { return v < p.second; }));
  for (int64_t done = 0; count > 0; ++it) {
    const int64_t at = begin - it->second;
    const int64_t n = std::min(count, (it + 1)->second - begin);
    f(it->first + at, n, done);
    begin += n, done += n, count -= n;
  }
}

void TokenDataset::read(int64_t begin, int64_t count, int64_t* dst) const {
  if (begin < 0 || count < 0 || begin > size_ - count)
    HP_THROW(ValueError, "data", "tokens [", begin, ", ", begin + count, ") of dataset '",
             options_.path, "' are outside its ", size_, " tokens");
  if (base_) {
    for_pieces(begin, count, [&](int64_t at, int64_t n, int64_t done) { base_->read(at, n, dst + done); });
    return;
  }
  if (!indexed_) {
    std::copy(tokens_.data() + begin, tokens_.data() + begin + count, dst);
    return;
  }
  indexed_->read(begin, count, dst);
  // Checked as read rather than at load, so start-up never touches the tokens.
  for (int64_t i = 0; i < count; ++i)
    if (dst[i] < 0 || dst[i] >= vocab_size_)
      HP_THROW(ValueError, "data", "indexed dataset '", options_.path, "': token id ", dst[i],
               " at position ", begin + i, " of the token stream is outside [0, ", vocab_size_,
               ") of ", encoder_->describe(),
               "; was it prepared with another tokenizer? (data.tokenizer names the one it was "
               "prepared with)");
}

void TokenDataset::read_positions(int64_t begin, int64_t count, int64_t* dst) const {
  if (begin < 0 || count < 0 || begin > size_ - count)
    HP_THROW(ValueError, "data", "positions [", begin, ", ", begin + count, ") of dataset '",
             options_.path, "' are outside its ", size_, " tokens");
  if (base_) {
    // A subset's pieces are whole documents of the base, so each starts a document.
    for_pieces(begin, count, [&](int64_t at, int64_t n, int64_t done) {
      base_->read_positions(at, n, dst + done);
    });
    return;
  }
  if (count == 0) return;
  // d: the last document starting at or before `begin` (empty documents share a start).
  int64_t lo = 0, hi = std::max<int64_t>(num_documents_, 1) - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (document_start(mid) <= begin)
      lo = mid;
    else
      hi = mid - 1;
  }
  // The document of token begin + i, where its positions count from, and where it ends.
  int64_t d = lo, from = begin;
  auto end_of = [&](int64_t doc) {
    return doc + 1 >= num_documents_ ? size_ : document_start(doc + 1);
  };
  int64_t next = end_of(d);
  for (int64_t i = 0; i < count; ++i) {
    while (begin + i >= next) from = next, next = end_of(++d);
    dst[i] = begin + i - from;
  }
}

bool TokenDataset::has_mask() const {
  if (base_) return base_->has_mask();
  return !mask_.empty() || (indexed_ && indexed_->has_mask());
}

void TokenDataset::read_mask(int64_t begin, int64_t count, uint8_t* dst) const {
  if (begin < 0 || count < 0 || begin > size_ - count)
    HP_THROW(ValueError, "data", "mask [", begin, ", ", begin + count, ") of dataset '",
             options_.path, "' is outside its ", size_, " tokens");
  if (base_) {
    for_pieces(begin, count, [&](int64_t at, int64_t n, int64_t done) { base_->read_mask(at, n, dst + done); });
  } else if (!mask_.empty()) {
    std::copy(mask_.data() + begin, mask_.data() + begin + count, dst);
  } else if (indexed_ && indexed_->has_mask()) {
    indexed_->read_mask(begin, count, dst);
  } else {
    std::fill(dst, dst + count, uint8_t{1});
  }
}

std::vector<int32_t> TokenDataset::tokens(int64_t begin, int64_t count) const {
  std::vector<int64_t> wide(static_cast<size_t>(std::max<int64_t>(count, 0)));
  read(begin, count, wide.data());
  return std::vector<int32_t>(wide.begin(), wide.end());
}

int64_t TokenDataset::find_id_at_least(int64_t limit) const {
  if (base_) return base_->find_id_at_least(limit);
  if (mapped())
    HP_THROW(ValueError, "data", "indexed dataset '", options_.path,
             "' is not scanned; its ids are checked as they are read");
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] >= limit) return static_cast<int64_t>(i);
  return -1;
}

const DocumentEncoder& TokenDataset::encoder(const char* what) const {
  if (base_) return base_->encoder(what);
  if (!encoder_)
    HP_THROW(ValueError, "data", what, " needs a text or indexed dataset; '", options_.path,
             "' has format ", enum_name(options_.format));
  return *encoder_;
}

std::vector<int32_t> TokenDataset::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  encoder("encode").encode(text, ids);
  return ids;
}

std::string TokenDataset::decode(const std::vector<int32_t>& ids) const {
  return encoder("decode").decode(ids);
}

}  // namespace hp::data
