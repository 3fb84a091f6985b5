// `hp data prepare INPUT... --out PREFIX ...`: tokenize corpora into an indexed dataset (Megatron
// .bin/.idx) for data.format: indexed; `hp data info PREFIX`: what one holds.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "commands.h"
#include "hp/core/byte_size.h"
#include "hp/data/dataset.h"
#include "hp/data/indexed.h"
#include "hp/data/indexed_ids.h"
#include "hp/data/prepare.h"
#include "hp/io/tokenizer.h"

namespace hp::cli {

namespace {

namespace fs = std::filesystem;

const char* kPrepareUsage =
    "usage: hp data prepare INPUT... --out PREFIX [--tokenizer FILE | --model DIR] [--format "
    "text|jsonl|chat] [--field NAME] [--chat-template FILE] [--doc-separator STR] "
    "[--separator-token TOKEN] [--workers N] [--resume-every SIZE] [--skip-bad-lines] "
    "[--overwrite] "
    "[--quiet]";

// C escapes in a flag value (\n \t \r \0 \\ \xHH), so a shell can pass "\n\n" as a blank line.
std::string unescape(const std::string& flag, const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) throw UsageError{flag + " '" + s + "' ends with a lone backslash"};
    switch (s[i]) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      case '\\':
        out += '\\';
        break;
      case 'x': {
        const std::string hex = s.substr(i + 1, 2);
        if (hex.size() != 2 || !std::isxdigit(static_cast<unsigned char>(hex[0])) ||
            !std::isxdigit(static_cast<unsigned char>(hex[1])))
          throw UsageError{flag + " '" + s + "': \\x needs two hex digits"};
        out += static_cast<char>(std::stoi(hex, nullptr, 16));
        i += 2;
        break;
      }
      default:
        throw UsageError{flag + " '" + s + "': unknown escape \\" + std::string(1, s[i]) +
                         " (\\n \\t \\r \\0 \\\\ \\xHH)"};
    }
  }
  return out;
}

std::string millions(double n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, n >= 1e6 ? "%.2fM" : "%.0f", n >= 1e6 ? n / 1e6 : n);
  return buf;
}

void print_progress(const data::PrepareProgress& p, bool tty, bool last) {
  const double pct = p.file_bytes ? 100.0 * double(p.file_bytes_done) / double(p.file_bytes) : 100;
  const double mbs = p.seconds > 0 ? double(p.bytes) / 1e6 / p.seconds : 0;
  std::fprintf(stderr,
               "%sprepare: %5.1f%% of %s, %lld/%lld files, %s documents, %s tokens, "
               "%.1f MB/s%s",
               tty ? "\r" : "", pct, human_bytes(double(p.file_bytes)).c_str(),
               static_cast<long long>(p.files_done), static_cast<long long>(p.files),
               millions(double(p.documents)).c_str(), millions(double(p.tokens)).c_str(), mbs,
               tty && !last ? "" : "\n");
  std::fflush(stderr);
}

int prepare(Args args) {
  reject_unknown_flags(args,
                       {"--out", "--tokenizer", "--model", "--format", "--field", "--chat-template",
                        "--doc-separator", "--separator-token", "--workers", "--resume-every"},
                       {"--skip-bad-lines", "--overwrite", "--quiet"});
  data::PrepareOptions o;
  std::string model, value;
  if (!take_value(args, "--out", &o.out))
    throw UsageError{std::string("--out PREFIX is required; ") + kPrepareUsage};
  take_value(args, "--tokenizer", &o.tokenizer);
  take_value(args, "--model", &model);
  if (!o.tokenizer.empty() && !model.empty())
    throw UsageError{"give --tokenizer FILE or --model DIR, not both"};
  if (!model.empty()) {
    if (!io::Tokenizer::in_dir(model))
      throw UsageError{"--model " + model + " has no tokenizer.json or tiktoken.model"};
    o.tokenizer = model;
  }
  take_value(args, "--format", &o.format);
  if (o.format != "text" && o.format != "jsonl" && o.format != "chat")
    throw UsageError{"--format expects text or jsonl or chat, got '" + o.format + "'"};
  const bool has_field = take_value(args, "--field", &o.field);
  if (has_field && o.format == "text")
    throw UsageError{"--field applies to --format jsonl or chat"};
  if (take_value(args, "--chat-template", &o.chat_template) && o.format != "chat")
    throw UsageError{"--chat-template applies to --format chat"};
  // A chat template beside the model's tokenizer.json (tokenizer_config.json) is the default.
  if (o.format == "chat" && o.chat_template.empty() && !model.empty())
    o.chat_template = (fs::path(model) / "tokenizer_config.json").string();
  if (take_value(args, "--doc-separator", &value)) {
    if (o.format != "text") throw UsageError{"--doc-separator applies to --format text"};
    o.doc_separator = unescape("--doc-separator", value);
  }
  take_value(args, "--separator-token", &o.separator_token);
  if (take_value(args, "--workers", &value))
    o.workers = static_cast<int>(parse_int("--workers", value, 1, 4096));
  if (take_value(args, "--resume-every", &value)) {
    const int64_t every = parse_byte_size(value, "--resume-every", "data");
    if (every < 1)
      throw UsageError{"--resume-every expects a size of at least 1 byte, got " + value};
    o.checkpoint_bytes = static_cast<uint64_t>(every);
  }
  o.skip_bad_lines = take_flag(args, "--skip-bad-lines");
  if (o.skip_bad_lines && o.format == "text")
    throw UsageError{"--skip-bad-lines applies to --format jsonl or chat"};
  o.overwrite = take_flag(args, "--overwrite");
  const bool quiet = take_flag(args, "--quiet");
  if (args.empty()) throw UsageError{std::string("no INPUT given; ") + kPrepareUsage};
  o.inputs = args;

  const bool tty = ::isatty(STDERR_FILENO) == 1;
  if (!quiet) {
    o.progress_interval_s = tty ? 1.0 : 10.0;
    o.on_progress = [tty](const data::PrepareProgress& p) { print_progress(p, tty, false); };
  }
  const data::PrepareResult r = data::prepare_dataset(o);
  if (!quiet && tty) std::fputc('\n', stderr);
  if (r.resumed)
    std::printf(
        "resumed an unfinished prepare: %s (%llu bytes) of input and %lld documents were already "
        "done\n",
        human_bytes(double(r.resumed_bytes)).c_str(),
        static_cast<unsigned long long>(r.resumed_bytes),
        static_cast<long long>(r.resumed_documents));
  const double mb = double(r.bytes) / 1e6, s = std::max(r.seconds, 1e-9);
  std::printf(
      "wrote %s + %s: %lld documents, %lld tokens (%s) from %lld file(s), %.1f MB in %.2f s: "
      "%.1f MB/s with %d worker(s)\n",
      data::indexed_bin_path(o.out).c_str(), data::indexed_idx_path(o.out).c_str(),
      static_cast<long long>(r.documents), static_cast<long long>(r.tokens),
      data::indexed_dtype_name(r.dtype), static_cast<long long>(r.files), mb, r.seconds, mb / s,
      r.workers);
  if (r.empty_documents > 0)
    std::printf("dropped %lld empty document(s)\n", static_cast<long long>(r.empty_documents));
  if (r.skipped_lines > 0)
    std::printf("skipped %lld bad line(s); the first: %s\n",
                static_cast<long long>(r.skipped_lines), r.first_skipped.c_str());
  if (o.format == "chat")
    std::printf("loss mask (assistant tokens) in %s\n", data::indexed_mask_path(o.out).c_str());
  std::printf("train on it with data: {format: indexed, path: %s%s%s}\n", o.out.c_str(),
              o.tokenizer.empty() ? "" : (", tokenizer: " + o.tokenizer).c_str(),
              o.separator_token.empty()
                  ? ""
                  : (", separator_token: \"" + o.separator_token + "\"").c_str());
  return 0;
}

int info(Args args) {
  reject_unknown_flags(args, {}, {"--verify"});
  const bool verify = take_flag(args, "--verify");
  if (args.size() != 1) throw UsageError{"usage: hp data info PREFIX [--verify]"};
  const auto ds = data::IndexedDataset::open(args[0]);
  std::printf("indexed dataset %s\n", args[0].c_str());
  std::printf("dtype      %s\n", data::indexed_dtype_name(ds->dtype()));
  std::printf("sequences  %lld\ndocuments  %lld\ntokens     %lld (%s)\n",
              static_cast<long long>(ds->num_sequences()),
              static_cast<long long>(ds->num_documents()), static_cast<long long>(ds->num_tokens()),
              human_bytes(double(ds->num_tokens()) * double(data::indexed_dtype_size(ds->dtype())))
                  .c_str());
  if (ds->has_mask()) {
    // One pass over the mask bytes (the tokens are never read).
    int64_t on = 0;
    std::vector<uint8_t> buf(size_t{1} << 20);
    for (int64_t at = 0; at < ds->num_tokens(); at += int64_t(buf.size())) {
      const int64_t n = std::min<int64_t>(int64_t(buf.size()), ds->num_tokens() - at);
      ds->read_mask(at, n, buf.data());
      for (int64_t i = 0; i < n; ++i) on += buf[size_t(i)];
    }
    std::printf("loss mask  %s: %lld of the tokens are targets\n",
                data::indexed_mask_path(args[0]).c_str(), static_cast<long long>(on));
  }
  // The largest id: --verify scans the tokens (and refreshes the record); otherwise the record
  // hp data prepare wrote, when there is one that matches.
  bool scanned = verify;
  const data::MaxTokenId m =
      verify ? data::scan_max_token_id(*ds) : data::max_token_id(*ds, &scanned);
  if (verify) data::write_max_token_id(*ds, m);
  std::printf("max id     %lld at document %lld, offset %lld (position %lld; %s)\n",
              static_cast<long long>(m.id), static_cast<long long>(m.document),
              static_cast<long long>(m.offset), static_cast<long long>(m.position),
              scanned ? "scanned" : data::indexed_ids_path(args[0]).c_str());
  return 0;
}

}  // namespace

int run_data(const Args& argv) {
  Args args = argv;
  if (args.empty()) throw UsageError{"expected 'prepare INPUT... --out PREFIX' or 'info PREFIX'"};
  const std::string sub = args.front();
  args.erase(args.begin());
  if (sub == "prepare") return prepare(args);
  if (sub == "info") return info(args);
  throw UsageError{"unknown subcommand '" + sub + "' (expected prepare or info)"};
}

}  // namespace hp::cli
