// `hp tokenize`: text → ids (one JSON array per input line) or, with --decode, ids → text, with a
// tokenizer.json, a model directory or a tiktoken directory (Kimi-K2), so ids can be compared with
// any other tool line by line.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer.h"

namespace hp::cli {

namespace {

constexpr const char* kUsage =
    "usage: hp tokenize --tokenizer FILE_OR_DIR (--text STR | --file F) [--decode] "
    "[--add-special] [--skip-special]\n"
    "\n"
    "  --tokenizer P    tokenizer.json, or a directory holding tokenizer.json or tiktoken.model\n"
    "                   (+ tokenizer_config.json, as Kimi-K2 publishes it)\n"
    "  --text STR       one input (newlines inside it are text)\n"
    "  --file F         one input per line of F (\"-\": standard input)\n"
    "  --add-special    apply the post-processor (BOS/EOS) when encoding; off by default\n"
    "  --decode         inputs are JSON arrays of ids; print the text of each\n"
    "  --skip-special   with --decode, leave special tokens out\n"
    "\n"
    "Encoding prints one JSON array of ids per input, e.g. [9906, 1917].\n";

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

std::vector<int32_t> parse_ids(const std::string& line, const std::string& where) {
  io::Json arr = io::parse_json(line, where);
  if (!arr.is_array()) arr.fail("expected a JSON array of token ids, got " + arr.dump());
  std::vector<int32_t> ids;
  for (const io::Json& v : arr.elements()) {
    int64_t id = v.as_int();
    if (id < 0 || id > INT32_MAX) v.fail("token id " + std::to_string(id) + " out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

int run_tokenize(const Args& argv) {
  Args args = argv;
  if (take_flag(args, "--help") || take_flag(args, "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  reject_unknown_flags(args, {"--tokenizer", "--text", "--file"},
                       {"--decode", "--add-special", "--skip-special"});
  std::string path, text, file;
  if (!take_value(args, "--tokenizer", &path))
    throw UsageError{"--tokenizer FILE_OR_DIR is required (hp tokenize --help)"};
  bool has_text = take_value(args, "--text", &text);
  bool has_file = take_value(args, "--file", &file);
  if (has_text == has_file) throw UsageError{"give exactly one of --text STR or --file F"};
  const bool decode = take_flag(args, "--decode");
  const bool add_special = take_flag(args, "--add-special");
  const bool skip_special = take_flag(args, "--skip-special");
  if (add_special && decode) throw UsageError{"--add-special applies to encoding, not --decode"};
  if (skip_special && !decode) throw UsageError{"--skip-special applies to --decode only"};
  reject_leftovers(args);

  io::Tokenizer tok = io::Tokenizer::from_file(path);
  std::ifstream in_file;
  std::istream* in = &std::cin;
  if (has_file && file != "-") {
    in_file.open(file, std::ios::binary);
    if (!in_file) HP_THROW(IoError, "tokenize", file, ": cannot open");
    in = &in_file;
  }
  const std::string name = has_text ? std::string("--text") : file == "-" ? "<stdin>" : file;
  auto process = [&](const std::string& input, size_t line_no) {
    std::string where = name;  // appended piecewise: GCC 12's -Wrestrict misfires on a + chain
    if (has_file) where.append(1, ':').append(std::to_string(line_no));
    if (decode) {
      std::string out = tok.decode(parse_ids(input, where), skip_special);
      out += '\n';
      std::fwrite(out.data(), 1, out.size(), stdout);
      return;
    }
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(input, add_special);
    } catch (const ValueError& e) {
      HP_THROW(ValueError, "tokenize", where, ": ", e.what());
    }
    std::string out = ids_json(ids) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  };
  if (has_text) {
    process(text, 1);
    return 0;
  }
  std::string line;
  for (size_t line_no = 1; std::getline(*in, line); ++line_no) process(line, line_no);
  return 0;
}

}  // namespace hp::cli
