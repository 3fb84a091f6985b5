// What a document is in a text corpus file: a non-empty piece between occurrences of the document
// separator (found leftmost first, not overlapping), or the whole file when the separator is "".
// TokenDataset splits whole files with split_documents; hp data prepare streams files through a
// DocumentSplitter. Both give the same documents, however the stream is cut into pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace hp::data::detail {

// on_doc(text, offset): a document and the stream offset of its first byte.
using DocumentFn = std::function<void(std::string_view, uint64_t)>;

// Every document of `text` (one whole stream), in order; the views point into `text`.
void split_documents(std::string_view text, std::string_view separator, const DocumentFn& on_doc);

class DocumentSplitter {
 public:
  explicit DocumentSplitter(std::string separator) : sep_(std::move(separator)) {}

  // Appends the next bytes of the stream; calls on_doc for each document they complete (the view
  // is valid during the call only). A document stays buffered until its separator arrives, so
  // memory is one document plus one piece.
  void feed(std::string_view bytes, const DocumentFn& on_doc);
  // Ends the stream: the buffered remainder, if non-empty, is the last document.
  void finish(const DocumentFn& on_doc);
  // Bytes held for the unfinished document.
  size_t buffered() const { return buf_.size(); }
  const std::string& separator() const { return sep_; }

 private:
  std::string sep_;
  std::string buf_;  // unconsumed bytes: they start at stream offset buf_offset_
  uint64_t buf_offset_ = 0;
  size_t searched_ = 0;  // buf_[0, searched_) holds no separator start
};

}  // namespace hp::data::detail
