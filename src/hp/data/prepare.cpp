#include "hp/data/prepare.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/data/chat.h"
#include "hp/data/documents.h"
#include "hp/data/encoder.h"
#include "hp/data/files.h"
#include "hp/data/indexed_ids.h"
#include "hp/data/input.h"
#include "hp/io/json.h"

namespace hp::data {

namespace fs = std::filesystem;

namespace {

constexpr int kJournalVersion = 1;
// Decompressed bytes read from an input per call.
constexpr size_t kReadChunk = size_t{1} << 20;

// Where reading continues: input file `file`, decompressed byte `offset`, 1-based `line`.
struct Cursor {
  int64_t file = 0;
  uint64_t offset = 0;
  int64_t line = 1;
};

// One document (text) or line (jsonl) of a batch: bytes [begin, begin + size) of Batch::bytes,
// found at `where` (text: decompressed byte offset; jsonl: line number).
struct Item {
  size_t begin = 0, size = 0;
  int64_t where = 0;
};

// Whole documents of one input file, in order, and the cursor after them.
struct Batch {
  int64_t seq = 0;
  int64_t file = 0;
  std::string bytes;
  std::vector<Item> items;
  Cursor end;
  uint64_t bytes_read = 0;     // decompressed input bytes up to `end`
  uint64_t file_position = 0;  // bytes of the stored file consumed (progress)
  std::exception_ptr error;    // the reader failed here: surfaces in input order
};

// A batch encoded in the dataset's dtype: documents of one sequence each.
struct Encoded {
  Batch batch;  // items and bytes dropped, the rest kept
  std::string ids;
  std::string mask;  // chat: one byte per id
  std::vector<int32_t> lengths;
  int64_t tokens = 0, empty = 0, skipped = 0;
  std::string first_skipped;
  std::exception_ptr error;
};

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(uint8_t(c)) != 0; });
}

std::string describe_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return std::to_string(st.st_size) + " bytes, mtime " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

class Preparer {
 public:
  explicit Preparer(const PrepareOptions& o)
      : o_(o),
        field_(!o.field.empty()     ? o.field
               : o.format == "chat" ? "messages"
                                    : "text"),
        encoder_(o.tokenizer, o.separator_token) {
    if (o.format == "chat")
      chat_.emplace(ChatTemplate::load(chat_template_path(o.chat_template, o.tokenizer)));
  }
  PrepareResult run();

 private:
  void check_options();
  void list_inputs();
  io::JsonValue fingerprint() const;
  std::optional<io::Json> read_journal(const io::JsonValue& fp) const;
  void write_journal(const io::JsonValue& fp, const Cursor& at,
                     const IndexedDatasetWriter::Position& pos) const;
  // From `from`, `bytes_done` decompressed input bytes being already done.
  void read_inputs(Cursor from, uint64_t bytes_done);
  void encode_batches();
  Encoded encode(Batch b) const;
  void process(const Item& item, const Batch& b, std::vector<int32_t>& ids, Encoded& e) const;
  // A chat line: its ids and mask, or false for a bad line skipped (skip_bad_lines).
  bool process_chat(std::string_view raw, const std::string& where, std::vector<int32_t>& ids,
                    Encoded& e) const;
  void push(Batch b);
  void stop_all();
  PrepareProgress progress(const Batch& b) const;

  const PrepareOptions& o_;
  const std::string field_;
  DocumentEncoder encoder_;
  std::optional<ChatTemplate> chat_;
  IndexedDType dtype_ = IndexedDType::u16;
  std::vector<std::string> files_;
  std::vector<uint64_t> file_sizes_;
  uint64_t file_bytes_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  PrepareResult res_;

  // Shared between the reader, the workers and the writer (this thread).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;             // read, not yet taken by a worker
  std::map<int64_t, Encoded> done_;     // encoded, not yet written
  int64_t produced_ = 0, written_ = 0;  // batches handed to workers / written
  int64_t max_in_flight_ = 0;
  bool reader_done_ = false;
  std::atomic<bool> stop_{false};  // also polled by the reader between reads
};

void Preparer::check_options() {
  if (o_.inputs.empty()) HP_THROW(ValueError, "data", "prepare: no input files or directories");
  if (o_.out.empty()) HP_THROW(ValueError, "data", "prepare: no output prefix (--out)");
  if (o_.format != "text" && o_.format != "jsonl" && o_.format != "chat")
    HP_THROW(ValueError, "data", "prepare: unknown input format '", o_.format,
             "' (text | jsonl | chat)");
  if (o_.format != "text" && !o_.doc_separator.empty())
    HP_THROW(ValueError, "data", "prepare: --doc-separator applies to text input; each JSONL line ",
             "is one document");
  if (o_.format == "text" && o_.skip_bad_lines)
    HP_THROW(ValueError, "data", "prepare: --skip-bad-lines applies to jsonl and chat input");
  if (o_.format == "text" && !o_.field.empty())
    HP_THROW(ValueError, "data", "prepare: --field applies to jsonl and chat input");
  if (o_.format != "chat" && !o_.chat_template.empty())
    HP_THROW(ValueError, "data", "prepare: --chat-template applies to chat input");
  if (o_.workers < 0)
    HP_THROW(ValueError, "data", "prepare: workers must be >= 0, got ", o_.workers);
  if (o_.batch_bytes < 1) HP_THROW(ValueError, "data", "prepare: batch_bytes must be >= 1");
}

void Preparer::list_inputs() {
  // The output's own files never count as input (an output prefix inside an input directory).
  std::vector<fs::path> own;
  for (const std::string& p :
       {indexed_bin_path(o_.out), indexed_idx_path(o_.out), indexed_mask_path(o_.out),
        prepare_journal_path(o_.out), indexed_ids_path(o_.out)})
    for (const char* suffix : {"", ".partial", ".tmp"})
      own.push_back(fs::absolute(p + suffix).lexically_normal());
  own.push_back(fs::absolute(o_.out + ".docs.partial").lexically_normal());
  for (const std::string& in : o_.inputs) {
    for (std::string& f : detail::list_files(in)) {
      if (std::find(own.begin(), own.end(), fs::absolute(f).lexically_normal()) == own.end())
        files_.push_back(std::move(f));
    }
  }
  if (files_.empty())
    HP_THROW(ValueError, "data", "prepare: the inputs hold no files besides the output's own");
  for (const std::string& f : files_) {
    file_sizes_.push_back(detail::InputFile(f).size());
    file_bytes_ += file_sizes_.back();
  }
}

// Everything the output depends on; a journal resumes only a run with the same fingerprint.
io::JsonValue Preparer::fingerprint() const {
  io::JsonValue inputs = io::JsonValue::array();
  for (const std::string& f : files_)
    inputs.push_back(io::JsonValue::object({{"path", f}, {"stat", describe_file(f)}}));
  return io::JsonValue::object(
      {{"version", kJournalVersion},
       {"format", o_.format},
       {"field", field_},
       {"chat_template", o_.chat_template},
       {"tokenizer", o_.tokenizer},
       {"tokenizer_stat", o_.tokenizer.empty() ? "" : describe_file(o_.tokenizer)},
       {"separator_token", o_.separator_token},
       {"doc_separator", o_.doc_separator},
       {"skip_bad_lines", o_.skip_bad_lines},
       {"dtype", int(dtype_)},
       {"inputs", std::move(inputs)}});
}

std::optional<io::Json> Preparer::read_journal(const io::JsonValue& fp) const {
  const std::string path = prepare_journal_path(o_.out);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A torn or foreign file: start over. Fingerprints compare by their canonical (sorted) form.
  std::optional<io::Json> j = io::try_parse_json(text, path);
  const std::optional<io::Json> stored = j ? j->find("fingerprint") : std::nullopt;
  if (!stored || stored->dump() != fp.dump(-1, io::KeyOrder::sorted)) return std::nullopt;
  return j;
}

void Preparer::write_journal(const io::JsonValue& fp, const Cursor& at,
                             const IndexedDatasetWriter::Position& pos) const {
  const io::JsonValue j = io::JsonValue::object(
      {{"fingerprint", fp},
       {"cursor",
        io::JsonValue::object({{"file", at.file}, {"offset", at.offset}, {"line", at.line}})},
       {"written",
        io::JsonValue::object(
            {{"tokens", pos.tokens}, {"sequences", pos.sequences}, {"documents", pos.documents}})},
       {"stats", io::JsonValue::object({{"bytes", res_.bytes},
                                        {"empty_documents", res_.empty_documents},
                                        {"skipped_lines", res_.skipped_lines},
                                        {"first_skipped", res_.first_skipped}})}});
  const std::string path = prepare_journal_path(o_.out), tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(-1, io::KeyOrder::sorted) << "\n";
    f.flush();
    if (!f) HP_THROW(IoError, "data", "cannot write '", tmp, "'");
  }
  // Durable before it replaces the old record (the data it points at is already synced).
  if (FILE* f = std::fopen(tmp.c_str(), "r")) {
    ::fsync(fileno(f));
    std::fclose(f);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    HP_THROW(IoError, "data", "cannot rename '", tmp, "' to '", path, "'");
}

void Preparer::push(Batch b) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || produced_ - written_ < max_in_flight_; });
  if (stop_) return;
  b.seq = produced_++;
  queue_.push_back(std::move(b));
  cv_.notify_all();
}

void Preparer::read_inputs(Cursor from, uint64_t bytes_done) {
  const bool jsonl = o_.format != "text";  // jsonl and chat: one record per line
  // Decompressed bytes of the files before the current one (a resumed run did them already).
  uint64_t bytes_before = bytes_done - from.offset;
  Batch batch;
  try {
    std::vector<char> chunk(kReadChunk);
    for (int64_t f = from.file; f < static_cast<int64_t>(files_.size()); ++f) {
      detail::InputStream in(files_[size_t(f)]);
      const uint64_t start = f == from.file ? from.offset : 0;
      in.skip(start);
      // Lines before a JSONL line: the newlines between the previous line's end and its start
      // (the splitter drops the empty pieces between consecutive newlines).
      int64_t newlines = (f == from.file ? from.line : 1) - 1;
      uint64_t prev_end = start;
      bool finishing = false;
      batch = Batch{};
      batch.file = f;
      detail::DocumentSplitter splitter(jsonl ? "\n" : o_.doc_separator);
      const size_t sep = splitter.separator().size();
      auto on_doc = [&](std::string_view text, uint64_t offset) {
        offset += start;
        if (jsonl) newlines += static_cast<int64_t>(offset - prev_end);
        prev_end = offset + text.size();
        batch.items.push_back(
            {batch.bytes.size(), text.size(), jsonl ? newlines + 1 : static_cast<int64_t>(offset)});
        batch.bytes.append(text);
        if (batch.bytes.size() < o_.batch_bytes || finishing) return;
        // A full batch ends after this document's separator: a clean place to resume from.
        batch.end = {f, prev_end + sep, newlines + 2};
        batch.bytes_read = bytes_before + prev_end + sep;
        batch.file_position = in.file_position();
        push(std::move(batch));
        batch = Batch{};
        batch.file = f;
      };
      for (size_t got; !stop_ && (got = in.read(chunk.data(), chunk.size())) > 0;)
        splitter.feed(std::string_view(chunk.data(), got), on_doc);
      if (stop_) break;
      finishing = true;
      splitter.finish(on_doc);
      batch.end = {f + 1, 0, 1};
      bytes_before += in.position();
      batch.bytes_read = bytes_before;
      batch.file_position = file_sizes_[size_t(f)];
      push(std::move(batch));  // also for an empty file: the cursor moves past it
    }
  } catch (...) {
    batch = Batch{};
    batch.error = std::current_exception();
    push(std::move(batch));
  }
  std::lock_guard<std::mutex> lock(mu_);
  reader_done_ = true;
  cv_.notify_all();
}

void Preparer::process(const Item& item, const Batch& b, std::vector<int32_t>& ids,
                       Encoded& e) const {
  const std::string_view raw(b.bytes.data() + item.begin, item.size);
  const std::string& file = files_[size_t(b.file)];
  std::string text_storage;
  std::string_view text = raw;
  if (chat_) {
    if (!blank(raw) && process_chat(raw, file + ":" + std::to_string(item.where), ids, e)) {
      IndexedDatasetWriter::encode_ids(ids, dtype_, e.ids);
      e.lengths.push_back(static_cast<int32_t>(ids.size()));
      e.tokens += static_cast<int64_t>(ids.size());
    }
    return;
  }
  if (o_.format == "jsonl") {
    if (blank(raw)) return;  // a whitespace-only line is no document and no error
    std::string why;
    if (const std::optional<io::Json> j = io::try_parse_json(raw, file, &why); !j) {
      why = "is not JSON (" + why + ")";
    } else if (!j->is_object()) {
      why = "is a JSON " + std::string(j->type_name()) + ", not an object";
    } else if (const io::JsonValue* f = j->value().find(field_); !f) {
      why = "has no field '" + field_ + "'";
    } else if (!f->is_string()) {
      why = "field '" + field_ + "' is a " + std::string(f->type_name()) + ", not a string";
    } else {
      text_storage = f->as_string();
      text = text_storage;
    }
    if (!why.empty()) {
      const std::string where = file + ":" + std::to_string(item.where);
      if (!o_.skip_bad_lines)
        HP_THROW(ValueError, "data", where, ": the line ", why,
                 " (--skip-bad-lines skips and counts such lines)");
      if (e.skipped++ == 0) e.first_skipped = where + ": the line " + why;
      return;
    }
    if (text.empty()) {
      ++e.empty;
      return;
    }
  }
  ids.clear();
  try {
    encoder_.encode(text, ids);
  } catch (const Error& ex) {
    if (o_.format == "jsonl") HP_THROW(ValueError, "data", file, ":", item.where, ": ", ex.what());
    HP_THROW(ValueError, "data", "'", file, "' document at byte ", item.where, ": ", ex.what());
  }
  ids.push_back(encoder_.separator_id());
  if (ids.size() > static_cast<size_t>(INT32_MAX))
    HP_THROW(ValueError, "data", "'", file, "' document at ",
             o_.format == "jsonl" ? "line " : "byte ", item.where, " has ", ids.size(),
             " tokens, more than one sequence holds (int32 lengths)");
  IndexedDatasetWriter::encode_ids(ids, dtype_, e.ids);
  e.lengths.push_back(static_cast<int32_t>(ids.size()));
  e.tokens += static_cast<int64_t>(ids.size());
}

bool Preparer::process_chat(std::string_view raw, const std::string& where,
                            std::vector<int32_t>& ids, Encoded& e) const {
  jinja::Value conv;
  try {
    conv = parse_chat_line(raw, field_, where);
  } catch (const ValueError& ex) {
    if (!o_.skip_bad_lines) throw;
    std::string why = ex.what();
    if (why.rfind("[data] ", 0) == 0) why.erase(0, 7);
    if (e.skipped++ == 0) e.first_skipped = why;
    return false;
  }
  ids.clear();
  std::vector<uint8_t> mask;
  encode_conversation(*chat_, encoder_, conv, where, ids, mask);
  if (ids.size() > static_cast<size_t>(INT32_MAX))
    HP_THROW(ValueError, "data", where, ": a conversation of ", ids.size(),
             " tokens, more than one sequence holds (int32 lengths)");
  e.mask.append(reinterpret_cast<const char*>(mask.data()), mask.size());
  return true;
}

Encoded Preparer::encode(Batch b) const {
  Encoded e;
  if (b.error) {
    e.error = b.error;
  } else {
    try {
      std::vector<int32_t> ids;
      for (const Item& item : b.items) process(item, b, ids, e);
    } catch (...) {
      e.error = std::current_exception();
    }
  }
  b.bytes = std::string();
  b.items = {};
  e.batch = std::move(b);
  return e;
}

void Preparer::encode_batches() {
  for (;;) {
    Batch b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || reader_done_; });
      if (stop_ || queue_.empty()) return;
      b = std::move(queue_.front());
      queue_.pop_front();
    }
    Encoded e = encode(std::move(b));
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t seq = e.batch.seq;
    done_.emplace(seq, std::move(e));
    cv_.notify_all();
  }
}

void Preparer::stop_all() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

PrepareProgress Preparer::progress(const Batch& b) const {
  PrepareProgress p;
  p.files = static_cast<int64_t>(files_.size());
  p.files_done = b.end.file;
  for (int64_t f = 0; f < b.file && f < p.files; ++f) p.file_bytes_done += file_sizes_[size_t(f)];
  p.file_bytes_done += b.file_position;
  p.file_bytes = file_bytes_;
  p.bytes = res_.bytes;
  p.documents = res_.documents;
  p.tokens = res_.tokens;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  return p;
}

PrepareResult Preparer::run() {
  check_options();
  dtype_ = indexed_dtype_for_vocab(encoder_.vocab_size());
  res_.dtype = dtype_;
  list_inputs();
  res_.files = static_cast<int64_t>(files_.size());

  const std::string idx = indexed_idx_path(o_.out), bin = indexed_bin_path(o_.out);
  std::error_code ec;
  if (!o_.overwrite && (fs::exists(idx, ec) || fs::exists(bin, ec)))
    HP_THROW(ValueError, "data", "prepare: '", fs::exists(idx, ec) ? idx : bin,
             "' already exists (--overwrite replaces the dataset)");
  if (!fs::path(o_.out).parent_path().empty())
    fs::create_directories(fs::path(o_.out).parent_path());
  std::remove(indexed_ids_path(o_.out).c_str());  // the replaced dataset's record

  const io::JsonValue fp = fingerprint();
  Cursor from;
  std::optional<IndexedDatasetWriter::Position> resume_at;
  if (const std::optional<io::Json> j = read_journal(fp)) {
    const io::Json c = j->at("cursor"), w = j->at("written"), s = j->at("stats");
    from = {c.get_int("file"), c.get_uint("offset"), c.get_int("line")};
    resume_at = IndexedDatasetWriter::Position{w.get_int("tokens"), w.get_int("sequences"),
                                               w.get_int("documents")};
    res_.resumed = true;
    res_.bytes = res_.resumed_bytes = s.get_uint("bytes");
    res_.documents = res_.resumed_documents = resume_at->documents;
    res_.tokens = resume_at->tokens;
    res_.empty_documents = s.get_int("empty_documents");
    res_.skipped_lines = s.get_int("skipped_lines");
    res_.first_skipped = s.get_string("first_skipped");
  }
  IndexedDatasetWriter writer(o_.out, dtype_, resume_at, /*with_mask=*/chat_.has_value());
  if (!resume_at) std::remove(prepare_journal_path(o_.out).c_str());  // another run's record

  res_.workers = o_.workers > 0 ? o_.workers : num_threads();
  max_in_flight_ = 2 * int64_t{res_.workers} + 2;
  std::thread reader([&, done = res_.bytes] { read_inputs(from, done); });
  std::vector<std::thread> workers;
  for (int w = 0; w < res_.workers; ++w) workers.emplace_back([&] { encode_batches(); });
  auto join = [&] {
    stop_all();
    reader.join();
    for (auto& t : workers) t.join();
  };

  bool crashed = false;
  try {
    uint64_t checkpoint_at = res_.bytes + o_.checkpoint_bytes;
    int64_t checkpoints = 0;
    bool stop_next = false;
    auto last_report = std::chrono::steady_clock::now();
    for (;;) {
      Encoded e;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock,
                 [&] { return done_.count(written_) || (reader_done_ && written_ == produced_); });
        auto it = done_.find(written_);
        if (it == done_.end()) break;  // the reader finished and everything is written
        e = std::move(it->second);
        done_.erase(it);
        ++written_;
        cv_.notify_all();
      }
      if (e.error) std::rethrow_exception(e.error);
      writer.add_encoded_documents(e.ids, e.lengths, e.mask);
      res_.documents += static_cast<int64_t>(e.lengths.size());
      res_.tokens += e.tokens;
      res_.empty_documents += e.empty;
      if (res_.skipped_lines == 0 && e.skipped > 0) res_.first_skipped = e.first_skipped;
      res_.skipped_lines += e.skipped;
      res_.bytes = e.batch.bytes_read;
      if (stop_next) {
        // As a crash between resume points: what was written after the last one is on disk.
        writer.flush();
        crashed = true;
        HP_THROW(IoError, "data", "prepare: stopped after ", checkpoints,
                 " resume point(s), as asked (partial files kept)");
      }
      if (res_.bytes >= checkpoint_at) {
        write_journal(fp, e.batch.end, writer.flush());
        checkpoint_at = res_.bytes + o_.checkpoint_bytes;
        stop_next = o_.stop_after_checkpoints > 0 && ++checkpoints >= o_.stop_after_checkpoints;
      }
      const auto now = std::chrono::steady_clock::now();
      if (o_.on_progress &&
          std::chrono::duration<double>(now - last_report).count() >= o_.progress_interval_s) {
        o_.on_progress(progress(e.batch));
        last_report = now;
      }
    }
    join();
    writer.finish();
    std::remove(prepare_journal_path(o_.out).c_str());
    // The largest id and where it is, for the check at open (indexed_ids.h): one pass over the
    // published .bin, which also covers the part a resumed run did not write itself.
    const auto published = IndexedDataset::open(o_.out);
    write_max_token_id(*published, scan_max_token_id(*published));
  } catch (...) {
    join();
    if (!crashed) {
      writer.discard();
      std::remove(prepare_journal_path(o_.out).c_str());
    }
    throw;
  }
  res_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  if (o_.on_progress) {
    Batch end;
    end.file = end.end.file = res_.files;
    o_.on_progress(progress(end));
  }
  return res_;
}

}  // namespace

std::string prepare_journal_path(const std::string& prefix) {
  return prefix + ".prepare.json";
}

PrepareResult prepare_dataset(const PrepareOptions& o) {
  return Preparer(o).run();
}

}  // namespace hp::data
