#include "hp/data/documents.h"

#include <algorithm>

namespace hp::data::detail {

namespace {

// Emits the documents of text[0, ...) that end at a separator found at or after `from` (no
// separator starts before it), then, when `final`, the remainder. Returns where scanning would
// continue: the byte after the last separator consumed (text.size() when final).
size_t scan(std::string_view text, std::string_view sep, size_t from, bool final, uint64_t base,
            const DocumentFn& on_doc) {
  size_t begin = 0;
  if (!sep.empty()) {
    for (size_t at; (at = text.find(sep, from)) != std::string_view::npos;) {
      if (at > begin) on_doc(text.substr(begin, at - begin), base + begin);
      begin = from = at + sep.size();
    }
  }
  if (final) {
    if (text.size() > begin) on_doc(text.substr(begin), base + begin);
    begin = text.size();
  }
  return begin;
}

}  // namespace

void split_documents(std::string_view text, std::string_view separator, const DocumentFn& on_doc) {
  scan(text, separator, 0, /*final=*/true, 0, on_doc);
}

void DocumentSplitter::feed(std::string_view bytes, const DocumentFn& on_doc) {
  buf_.append(bytes);
  if (sep_.empty()) return;  // one document per stream: nothing ends before finish()
  const size_t consumed = scan(buf_, sep_, searched_, /*final=*/false, buf_offset_, on_doc);
  buf_.erase(0, consumed);
  buf_offset_ += consumed;
  // A separator may straddle the end: the last sep - 1 bytes are searched again next time.
  searched_ = buf_.size() >= sep_.size() ? buf_.size() - sep_.size() + 1 : 0;
}

void DocumentSplitter::finish(const DocumentFn& on_doc) {
  scan(buf_, sep_, std::min(searched_, buf_.size()), /*final=*/true, buf_offset_, on_doc);
  buf_offset_ += buf_.size();
  buf_.clear();
  searched_ = 0;
}

}  // namespace hp::data::detail
