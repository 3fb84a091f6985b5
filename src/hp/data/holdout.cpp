// Document boundaries and document subsets of a TokenDataset (dataset.h): the held-out
// validation split (eval.split) and the training stream without it.
#include <algorithm>
#include <cmath>

#include "hp/core/error.h"
#include "hp/data/dataset.h"
#include "hp/data/indexed.h"

namespace hp::data {

int64_t TokenDataset::document_start(int64_t d) const {
  HP_CHECK(d >= 0 && d <= num_documents_, "document ", d, " of ", num_documents_);
  if (d == num_documents_) return size_;
  if (!indexed_) return doc_starts_[static_cast<size_t>(d)];
  const int64_t seq = indexed_->document_index(d);
  if (seq == indexed_->num_sequences()) return size_;
  return indexed_->sequence_pointer(seq) / indexed_dtype_size(indexed_->dtype());
}

const std::string& TokenDataset::order_cache_prefix() const {
  static const std::string none;
  return indexed_ ? options_.path : none;
}

std::shared_ptr<const TokenDataset> TokenDataset::subset(
    const std::shared_ptr<const TokenDataset>& base,
    const std::vector<std::pair<int64_t, int64_t>>& doc_ranges, const std::string& what) {
  std::shared_ptr<TokenDataset> ds(new TokenDataset());
  ds->options_ = base->options_;
  ds->options_.path = base->options_.path + " (" + what + ")";
  ds->files_ = base->files_;
  ds->vocab_size_ = base->vocab_size_;
  ds->separator_id_ = base->separator_id_;
  ds->base_ = base;
  for (const auto& [first, last] : doc_ranges) {
    const int64_t begin = base->document_start(first), end = base->document_start(last);
    if (end == begin) continue;
    ds->pieces_.emplace_back(begin, ds->size_);
    ds->size_ += end - begin;
    ds->num_documents_ += last - first;
  }
  ds->pieces_.emplace_back(base->size_, ds->size_);  // sentinel
  return ds;
}

std::pair<std::shared_ptr<const TokenDataset>, std::shared_ptr<const TokenDataset>>
TokenDataset::hold_out(const std::shared_ptr<const TokenDataset>& ds, double fraction) {
  const int64_t docs = ds->num_documents();
  if (!(fraction > 0 && fraction < 1))
    HP_THROW(ValueError, "data", "held-out fraction ", fraction, " of '", ds->options().path,
             "' is outside (0, 1)");
  // Document d is held out when floor((d + 1) · f) > floor(d · f): one in every 1/f, the first
  // at d = ceil(1/f) - 1.
  auto held = [&](int64_t d) {
    return std::floor(double(d + 1) * fraction) > std::floor(double(d) * fraction);
  };
  std::vector<std::pair<int64_t, int64_t>> train, eval;
  for (int64_t d = 0; d < docs; ++d) {
    auto& ranges = held(d) ? eval : train;
    if (!ranges.empty() && ranges.back().second == d)
      ranges.back().second = d + 1;
    else
      ranges.emplace_back(d, d + 1);
  }
  const DatasetFormat format = ds->options().format;
  if (eval.empty() || train.empty())
    HP_THROW(ValueError, "data", "a held-out fraction ", fraction, " of the ", docs,
             " document(s) of '", ds->options().path, "' holds out ",
             eval.empty() ? "none" : "all of them",
             format == DatasetFormat::text
                 ? " (text splits into documents at data.doc_separator, e.g. \"\\n\\n\"; \"\" is "
                   "one document per file)"
             : format == DatasetFormat::indexed ? ""
                                                : " (token files: one document per file)");
  return {subset(ds, train, "training documents"), subset(ds, eval, "held-out documents")};
}

}  // namespace hp::data
