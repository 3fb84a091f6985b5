// TokenDataset's chat format (dataset.h, chat.h): JSONL conversations tokenized at load, with a
// loss mask on the assistant's tokens.
#include <exception>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/data/chat.h"
#include "hp/data/dataset.h"
#include "hp/data/input.h"

namespace hp::data {

namespace {

// Lines are encoded in batches holding at least this many bytes, so the batch boundaries (and
// with them the stream) depend only on the corpus, not the thread count.
constexpr size_t kBatchBytes = size_t{1} << 18;

struct Line {
  std::string_view text;
  size_t file;
  int64_t number;  // 1-based
};

}  // namespace

void TokenDataset::load_chat() {
  encoder_.emplace(options_.tokenizer, options_.separator_token);
  vocab_size_ = encoder_->vocab_size();
  separator_id_ = encoder_->separator_id();
  const ChatTemplate tmpl =
      ChatTemplate::load(chat_template_path(options_.chat_template, options_.tokenizer));

  std::vector<std::string> texts;
  for (const std::string& path : files_) texts.push_back(detail::read_input(path));
  std::vector<Line> lines;
  std::vector<size_t> starts{0};  // batch b covers lines [starts[b], starts[b + 1])
  size_t bytes = 0;
  for (size_t f = 0; f < files_.size(); ++f) {
    const std::string_view t = texts[f];
    int64_t number = 0;
    for (size_t at = 0; at < t.size();) {
      size_t end = t.find('\n', at);
      if (end == std::string_view::npos) end = t.size();
      ++number;
      const std::string_view line = t.substr(at, end - at);
      at = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank
      lines.push_back({line, f, number});
      if ((bytes += line.size()) >= kBatchBytes) starts.push_back(lines.size()), bytes = 0;
    }
  }
  if (starts.back() != lines.size()) starts.push_back(lines.size());
  num_documents_ = static_cast<int64_t>(lines.size());

  const int64_t num_batches = static_cast<int64_t>(starts.size()) - 1;
  std::vector<std::vector<int32_t>> parts(num_batches);
  std::vector<std::vector<uint8_t>> masks(num_batches);
  std::vector<std::vector<int64_t>> ends(num_batches);
  std::vector<std::exception_ptr> errors(num_batches);
  parallel_blocks(num_batches, 1, [&](int64_t b, int64_t, int64_t) {
    try {
      for (size_t l = starts[b]; l < starts[b + 1]; ++l) {
        const std::string where = files_[lines[l].file] + ":" + std::to_string(lines[l].number);
        const jinja::Value conv = parse_chat_line(lines[l].text, "messages", where);
        encode_conversation(tmpl, *encoder_, conv, where, parts[b], masks[b]);
        ends[b].push_back(static_cast<int64_t>(parts[b].size()));
      }
    } catch (...) {
      errors[b] = std::current_exception();  // the first in stream order is reported
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  append_batches(parts, ends, &masks);
}

}  // namespace hp::data
