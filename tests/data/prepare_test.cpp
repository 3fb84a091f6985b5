// hp data prepare (prepare_dataset): text, JSONL, gzip and zstd inputs give the fixture's bytes;
// the output is the trainer's own token stream and does not depend on the worker count; bad JSONL
// lines fail by FILE:LINE or are skipped and counted; an interrupted run leaves no dataset that
// looks complete and resumes to the same bytes.
#include "hp/data/prepare.h"

#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>

#include "data/data_test_util.h"
#include "hp/data/dataset.h"
#include "hp/data/input.h"
#include "test_dir.h"

namespace hp::data {
namespace {

namespace fs = std::filesystem;
using test::indexed_fixture;
using test::read_bytes;
using test::TempDir;
using test::tokenizer_fixture;
using test::write_file;

// `text` as gzip, in `members` concatenated members (gzip -c a b > c).
std::string gzip(const std::string& text, int members = 1) {
  std::string out;
  for (int m = 0; m < members; ++m) {
    const size_t begin = text.size() * m / members, end = text.size() * (m + 1) / members;
    z_stream z{};
    EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string buf(deflateBound(&z, end - begin) + 32, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data() + begin));
    z.avail_in = static_cast<uInt>(end - begin);
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = static_cast<uInt>(buf.size());
    EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    buf.resize(z.total_out);
    deflateEnd(&z);
    out += buf;
  }
  return out;
}

// `text` as zstd, in `frames` concatenated frames.
std::string zstd(const std::string& text, int frames = 1) {
  std::string out;
  for (int f = 0; f < frames; ++f) {
    const size_t begin = text.size() * f / frames, end = text.size() * (f + 1) / frames;
    std::string buf(ZSTD_compressBound(end - begin), '\0');
    const size_t n = ZSTD_compress(buf.data(), buf.size(), text.data() + begin, end - begin, 3);
    EXPECT_FALSE(ZSTD_isError(n));
    buf.resize(n);
    out += buf;
  }
  return out;
}

PrepareOptions options(std::vector<std::string> inputs, std::string out) {
  PrepareOptions o;
  o.inputs = std::move(inputs);
  o.out = std::move(out);
  o.workers = 2;
  return o;
}

void expect_fixture(const std::string& prefix, const std::string& fixture = "corpus") {
  EXPECT_EQ(read_bytes(prefix + ".bin"), read_bytes(indexed_fixture(fixture + ".bin"))) << prefix;
  EXPECT_EQ(read_bytes(prefix + ".idx"), read_bytes(indexed_fixture(fixture + ".idx"))) << prefix;
}

TEST(Prepare, TextEqualsFixtureByteForByte) {
  TempDir dir;
  PrepareOptions o = options({indexed_fixture("corpus.txt")}, dir.file("out/corpus"));
  o.doc_separator = "\n\n";
  const PrepareResult r = prepare_dataset(o);
  expect_fixture(dir.file("out/corpus"));
  EXPECT_EQ(r.documents, 4);
  EXPECT_EQ(r.files, 1);
  EXPECT_EQ(r.dtype, IndexedDType::u16);
  EXPECT_EQ(r.bytes, read_bytes(indexed_fixture("corpus.txt")).size());
  EXPECT_FALSE(fs::exists(prepare_journal_path(dir.file("out/corpus"))));
}

TEST(Prepare, JsonlEqualsTheTextFixture) {
  TempDir dir;
  PrepareOptions o = options({indexed_fixture("corpus.jsonl")}, dir.file("j"));
  o.format = "jsonl";
  const PrepareResult r = prepare_dataset(o);
  expect_fixture(dir.file("j"));
  EXPECT_EQ(r.documents, 4);
  EXPECT_EQ(r.empty_documents, 1);  // {"text": ""}; the blank line is no document at all
  EXPECT_EQ(r.skipped_lines, 0);
}

TEST(Prepare, GzipAndZstdInputs) {
  TempDir dir;
  const std::string text = read_bytes(indexed_fixture("corpus.txt"));
  const std::string jsonl = read_bytes(indexed_fixture("corpus.jsonl"));
  write_file(dir.file("c.txt.gz"), gzip(text, 2));
  write_file(dir.file("c.txt.zst"), zstd(text, 2));
  write_file(dir.file("c.jsonl.gz"), gzip(jsonl));
  write_file(dir.file("c.jsonl.zst"), zstd(jsonl, 3));
  for (const char* name : {"c.txt.gz", "c.txt.zst"}) {
    PrepareOptions o = options({dir.file(name)}, dir.file(std::string(name) + ".out"));
    o.doc_separator = "\n\n";
    prepare_dataset(o);
    expect_fixture(o.out);
  }
  for (const char* name : {"c.jsonl.gz", "c.jsonl.zst"}) {
    PrepareOptions o = options({dir.file(name)}, dir.file(std::string(name) + ".out"));
    o.format = "jsonl";
    const PrepareResult r = prepare_dataset(o);
    expect_fixture(o.out);
    EXPECT_EQ(r.bytes, jsonl.size()) << name;  // decompressed bytes
  }
  // The trainer's text loader decompresses the same way.
  auto ds = TokenDataset::load({.path = dir.file("c.txt.zst"), .doc_separator = "\n\n"});
  auto plain = TokenDataset::load({.path = indexed_fixture("corpus.txt"), .doc_separator = "\n\n"});
  EXPECT_EQ(ds->tokens(0, ds->size()), plain->tokens(0, plain->size()));
}

TEST(Prepare, CorruptCompressedInputsNameTheFile) {
  TempDir dir;
  std::string text;
  for (int i = 0; text.size() < 100000; ++i) text += std::to_string(i * 7919 % 100003) + " ";
  const std::string gz = gzip(text), zs = zstd(text);
  write_file(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
  write_file(dir.file("cut.zst"), zs.substr(0, zs.size() - 3));
  std::string bad = gz;
  bad[bad.size() / 2] ^= 0x55;
  bad[bad.size() / 2 + 1] ^= 0x55;
  write_file(dir.file("flipped.gz"), bad);
  write_file(dir.file("plain.gz"), "not compressed at all");
  write_file(dir.file("empty.zst"), "");
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"cut.gz", {"cut.gz", "truncated", "gzip member"}},
      {"cut.zst", {"cut.zst", "truncated", "zstd frame"}},
      {"flipped.gz", {"flipped.gz", "not valid gzip data"}},
      {"plain.gz", {"plain.gz", "magic 1f 8b", "6e 6f"}},
      {"empty.zst", {"empty.zst", "magic 28 b5 2f fd", "empty"}}};
  for (const auto& [name, needles] : cases) {
    PrepareOptions o = options({dir.file(name)}, dir.file(std::string(name) + ".out"));
    try {
      prepare_dataset(o);
      ADD_FAILURE() << name << ": no error";
    } catch (const IoError& e) {
      for (const char* n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
    }
    // A failed run leaves nothing behind.
    for (const char* ext : {".bin", ".idx", ".bin.partial", ".idx.partial", ".prepare.json"})
      EXPECT_FALSE(fs::exists(o.out + ext)) << name << ext;
  }
}

TEST(Prepare, BadJsonlLinesFailByFileAndLineOrAreSkipped) {
  TempDir dir;
  const std::string good = "{\"text\": \"one\"}\n{\"text\": \"two \\ud83d\\ude00\"}\n";
  const std::pair<std::string, std::vector<const char*>> cases[] = {
      {good + "\n{\"text\": \"three\"\n", {"bad.jsonl:4:", "is not JSON", "--skip-bad-lines"}},
      {good + "[1, 2]\n", {"bad.jsonl:3:", "is a JSON array, not an object"}},
      {good + "{\"body\": \"x\"}\n", {"bad.jsonl:3:", "has no field 'text'"}},
      {good + "{\"text\": 5}\n", {"bad.jsonl:3:", "field 'text' is a number, not a string"}},
      {good + "{\"text\": \"a\xff\"}\n", {"bad.jsonl:3:", "is not JSON", "UTF-8"}}};
  for (const auto& [body, needles] : cases) {
    write_file(dir.file("bad.jsonl"), body);
    PrepareOptions o = options({dir.file("bad.jsonl")}, dir.file("bad"));
    o.format = "jsonl";
    try {
      prepare_dataset(o);
      ADD_FAILURE() << body << ": no error";
    } catch (const ValueError& e) {
      for (const char* n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
    }
    EXPECT_FALSE(fs::exists(dir.file("bad.idx")));
  }
  // Skipped: counted, the first named, and the good lines written as if alone.
  write_file(dir.file("mixed.jsonl"),
             "not json\n" + good + "{\"text\": 5}\n[]\n{\"text\": \"end\"}\n");
  PrepareOptions o = options({dir.file("mixed.jsonl")}, dir.file("mixed"));
  o.format = "jsonl";
  o.skip_bad_lines = true;
  const PrepareResult r = prepare_dataset(o);
  EXPECT_EQ(r.skipped_lines, 3);
  EXPECT_NE(r.first_skipped.find("mixed.jsonl:1: the line is not JSON"), std::string::npos)
      << r.first_skipped;
  EXPECT_EQ(r.documents, 3);
  write_file(dir.file("clean.jsonl"), good + "{\"text\": \"end\"}\n");
  PrepareOptions c = options({dir.file("clean.jsonl")}, dir.file("clean"));
  c.format = "jsonl";
  prepare_dataset(c);
  EXPECT_EQ(read_bytes(dir.file("mixed.bin")), read_bytes(dir.file("clean.bin")));
  EXPECT_EQ(read_bytes(dir.file("mixed.idx")), read_bytes(dir.file("clean.idx")));
  // The escaped surrogate pair is the emoji's UTF-8 bytes.
  const auto ds = IndexedDataset::open(dir.file("clean"));
  EXPECT_EQ(ds->sequence(1),
            (std::vector<int64_t>{'t', 'w', 'o', ' ', 0xf0, 0x9f, 0x98, 0x80, kByteSeparator}));
}

// A corpus of many documents and files with a BPE tokenizer: any worker count and batch size
// gives the same bytes, and the dataset's stream is the one TokenDataset builds from the text.
TEST(Prepare, OutputIsTheTrainersStreamForAnyWorkerCount) {
  TempDir dir;
  const std::string kjv = read_bytes(std::string(HP_TEST_DIR) + "/../../data/kjv.txt");
  for (int f = 0; f < 3; ++f)
    write_file(dir.file("corpus/part" + std::to_string(f) + ".txt"),
               kjv.substr(size_t(f) * 60000, 60000));
  const std::string tok = tokenizer_fixture("qwen2");
  std::string want_bin, want_idx;
  for (const auto& [workers, batch] :
       std::vector<std::pair<int, size_t>>{{1, size_t{1} << 20}, {3, 512}, {8, 64}}) {
    PrepareOptions o = options({dir.file("corpus")}, dir.file("w" + std::to_string(workers)));
    o.tokenizer = tok;
    o.doc_separator = "\n\n";
    o.workers = workers;
    o.batch_bytes = batch;
    const PrepareResult r = prepare_dataset(o);
    EXPECT_EQ(r.workers, workers);
    EXPECT_EQ(r.dtype, IndexedDType::u16);  // the fixture vocabulary is small
    if (want_bin.empty()) {
      want_bin = read_bytes(o.out + ".bin");
      want_idx = read_bytes(o.out + ".idx");
      ASSERT_GT(r.documents, 50);
      continue;
    }
    EXPECT_EQ(read_bytes(o.out + ".bin"), want_bin) << workers << " workers";
    EXPECT_EQ(read_bytes(o.out + ".idx"), want_idx) << workers << " workers";
  }
  const auto text =
      TokenDataset::load({.path = dir.file("corpus"), .tokenizer = tok, .doc_separator = "\n\n"});
  const auto indexed = TokenDataset::load(
      {.path = dir.file("w1"), .format = DatasetFormat::indexed, .tokenizer = tok});
  ASSERT_EQ(indexed->size(), text->size());
  EXPECT_EQ(indexed->tokens(0, indexed->size()), text->tokens(0, text->size()));
  EXPECT_EQ(indexed->num_documents(), text->num_documents());
  EXPECT_EQ(indexed->separator_id(), text->separator_id());
  EXPECT_EQ(indexed->vocab_size(), text->vocab_size());
}

// Stopped after two resume points (as a crash would stop it): no PREFIX.idx, so nothing can load
// it; the next run resumes mid-file and writes the same bytes as an uninterrupted run. Plain text,
// JSONL (line numbers continue: a bad line after the resume point is named by its true line) and
// gzip (the finished part is decompressed again, not re-encoded).
TEST(Prepare, InterruptedRunResumesToTheSameBytes) {
  TempDir dir;
  std::string text, jsonl;
  for (int i = 0; i < 3000; ++i) {
    const std::string doc = "document " + std::to_string(i) + std::string(size_t(i % 37), 'z');
    text += doc + "\n\n";
    jsonl += "{\"text\": \"" + doc + "\"}\n";
  }
  write_file(dir.file("a.txt"), text);
  write_file(dir.file("b.txt"), text.substr(0, 5000));
  write_file(dir.file("c.jsonl"), jsonl);
  write_file(dir.file("c.jsonl.gz"), gzip(jsonl));
  struct Case {
    std::vector<std::string> inputs;
    std::string format;
  };
  const Case cases[] = {{{dir.file("a.txt"), dir.file("b.txt")}, "text"},
                        {{dir.file("c.jsonl")}, "jsonl"},
                        {{dir.file("c.jsonl.gz")}, "jsonl"}};
  int n = 0;
  for (const Case& c : cases) {
    auto opts = [&](const std::string& out) {
      PrepareOptions o = options(c.inputs, dir.file(out));
      o.format = c.format;
      if (c.format == "text") o.doc_separator = "\n\n";
      o.batch_bytes = 1000;
      o.checkpoint_bytes = 8000;
      return o;
    };
    const std::string whole = "whole" + std::to_string(n), cut = "cut" + std::to_string(n++);
    const PrepareResult full = prepare_dataset(opts(whole));
    PrepareOptions o = opts(cut);
    o.stop_after_checkpoints = 2;
    EXPECT_THROW_MSG(prepare_dataset(o), IoError, "[data]", "stopped after 2");
    const std::string prefix = dir.file(cut);
    EXPECT_FALSE(fs::exists(prefix + ".idx"));
    EXPECT_FALSE(fs::exists(prefix + ".bin"));
    EXPECT_TRUE(fs::exists(prepare_journal_path(prefix)));
    EXPECT_THROW_MSG(TokenDataset::load({.path = prefix, .format = DatasetFormat::indexed}),
                     IoError, "incomplete", "did not finish");
    o.stop_after_checkpoints = 0;
    o.workers = 3;  // the worker count is no part of what a resume must match
    const PrepareResult r = prepare_dataset(o);
    EXPECT_TRUE(r.resumed) << c.format;
    EXPECT_GT(r.resumed_documents, 0);
    EXPECT_GT(r.resumed_bytes, 0u);
    EXPECT_LT(r.resumed_documents, full.documents);
    EXPECT_EQ(r.documents, full.documents);
    EXPECT_EQ(r.tokens, full.tokens);
    EXPECT_EQ(r.bytes, full.bytes);
    EXPECT_EQ(read_bytes(prefix + ".bin"), read_bytes(dir.file(whole) + ".bin")) << c.format;
    EXPECT_EQ(read_bytes(prefix + ".idx"), read_bytes(dir.file(whole) + ".idx")) << c.format;
    EXPECT_FALSE(fs::exists(prepare_journal_path(prefix)));
    EXPECT_FALSE(fs::exists(prefix + ".idx.partial"));
  }

  // JSONL line numbers after a resume: line 2900 is bad; the resumed run names it.
  std::string broken = jsonl;
  size_t at = 0;
  for (int line = 1; line < 2900; ++line) at = broken.find('\n', at) + 1;
  broken.insert(at, "{oops}\n");
  write_file(dir.file("broken.jsonl"), broken);
  PrepareOptions o = options({dir.file("broken.jsonl")}, dir.file("broken"));
  o.format = "jsonl";
  o.batch_bytes = 1000;
  o.checkpoint_bytes = 8000;
  o.stop_after_checkpoints = 2;
  EXPECT_THROW_MSG(prepare_dataset(o), IoError, "stopped");
  o.stop_after_checkpoints = 0;
  EXPECT_THROW_MSG(prepare_dataset(o), ValueError, "broken.jsonl:2900:", "not JSON");

  // Inputs changed since the interruption: start over instead of resuming.
  PrepareOptions s = options({dir.file("a.txt")}, dir.file("changed"));
  s.doc_separator = "\n\n";
  s.batch_bytes = 1000;
  s.checkpoint_bytes = 8000;
  s.stop_after_checkpoints = 1;
  EXPECT_THROW_MSG(prepare_dataset(s), IoError, "stopped");
  write_file(dir.file("a.txt"), text + "one more document\n\n");
  s.stop_after_checkpoints = 0;
  const PrepareResult fresh = prepare_dataset(s);
  EXPECT_FALSE(fresh.resumed);
  EXPECT_EQ(fresh.documents, 3001);
}

TEST(Prepare, ExistingDatasetNeedsOverwrite) {
  TempDir dir;
  PrepareOptions o = options({indexed_fixture("corpus.txt")}, dir.file("d"));
  prepare_dataset(o);
  const std::string one_doc = read_bytes(dir.file("d.idx"));
  o.doc_separator = "\n\n";
  EXPECT_THROW_MSG(prepare_dataset(o), ValueError, "[data]", "d.idx", "already exists",
                   "--overwrite");
  EXPECT_EQ(read_bytes(dir.file("d.idx")), one_doc);  // untouched
  o.overwrite = true;
  prepare_dataset(o);
  expect_fixture(dir.file("d"));
}

// An output prefix inside an input directory: its own files are not read back as input.
TEST(Prepare, OutputInsideTheInputDirectoryIsNotInput) {
  TempDir dir;
  write_file(dir.file("in/a.txt"), read_bytes(indexed_fixture("corpus.txt")));
  PrepareOptions o = options({dir.file("in")}, dir.file("in/corpus"));
  o.doc_separator = "\n\n";
  prepare_dataset(o);
  o.overwrite = true;
  const PrepareResult r = prepare_dataset(o);
  EXPECT_EQ(r.files, 1);
  expect_fixture(dir.file("in/corpus"));
}

TEST(Prepare, EmptyInputsMakeAnEmptyDataset) {
  TempDir dir;
  write_file(dir.file("e/a.txt"), "");
  write_file(dir.file("e/b.txt"), "\n\n\n\n");
  PrepareOptions o = options({dir.file("e")}, dir.file("empty"));
  o.doc_separator = "\n\n";
  const PrepareResult r = prepare_dataset(o);
  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.documents, 0);
  const auto ds = IndexedDataset::open(dir.file("empty"));
  EXPECT_EQ(ds->num_tokens(), 0);
  EXPECT_EQ(ds->num_documents(), 0);
  EXPECT_EQ(read_bytes(dir.file("empty.idx")).size(), 34u + 8);
}

TEST(Prepare, OptionErrors) {
  TempDir dir;
  const std::string in = indexed_fixture("corpus.txt");
  auto fails = [&](PrepareOptions o, const char* needle) {
    EXPECT_THROW_MSG(prepare_dataset(o), Error, "[data]", needle);
    EXPECT_FALSE(fs::exists(o.out + ".bin.partial")) << needle;
  };
  PrepareOptions o = options({}, dir.file("x"));
  fails(o, "no input");
  o = options({in}, dir.file("x"));
  o.format = "csv";
  fails(o, "unknown input format 'csv'");
  o = options({in}, dir.file("x"));
  o.format = "jsonl";
  o.doc_separator = "\n";
  fails(o, "--doc-separator applies to text");
  o = options({in}, dir.file("x"));
  o.skip_bad_lines = true;
  fails(o, "--skip-bad-lines applies to jsonl");
  o = options({dir.file("missing")}, dir.file("x"));
  fails(o, "does not exist");
  o = options({in}, dir.file("x"));
  o.tokenizer = dir.file("nope.json");
  fails(o, "cannot load tokenizer");
  o = options({in}, dir.file("x"));
  o.separator_token = "</s>";
  fails(o, "needs a tokenizer.json");
}

// The decompressing reader on its own: skip() and position() count decompressed bytes.
TEST(Prepare, InputStreamSkipsDecompressedBytes) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += std::to_string(i) + ",";
  write_file(dir.file("t.zst"), zstd(text, 4));
  write_file(dir.file("t.gz"), gzip(text, 3));
  for (const char* name : {"t.zst", "t.gz"}) {
    detail::InputStream in(dir.file(name));
    in.skip(70001);
    EXPECT_EQ(in.position(), 70001u);
    char buf[5];
    size_t got = 0;
    while (got < 5) got += in.read(buf + got, 5 - got);
    EXPECT_EQ(std::string(buf, 5), text.substr(70001, 5)) << name;
    EXPECT_THROW_MSG(in.skip(text.size()), IoError, name, "ends at byte");
    EXPECT_EQ(detail::read_input(dir.file(name)), text) << name;
  }
}

}  // namespace
}  // namespace hp::data
