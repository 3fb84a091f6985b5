#include "hp/data/dataset.h"

#include <sys/stat.h>

#include <cstdint>
#include <limits>

#include "data/data_test_util.h"
#include "hp/core/thread_pool.h"
#include "hp/data/files.h"
#include "hp/data/indexed.h"
#include "hp/io/json.h"
#include "test_dir.h"

namespace hp::data {
namespace {

using test::indexed_fixture;
using test::read_bytes;
using test::TempDir;
using test::tokenizer_fixture;
using test::write_file;
using test::write_tokens;

std::vector<int32_t> stream_of(const TokenDataset& ds) {
  return ds.tokens(0, ds.size());
}

// Byte values of `text`, then the byte-level separator.
void append_byte_doc(std::vector<int32_t>& out, const std::string& text) {
  for (unsigned char c : text) out.push_back(c);
  out.push_back(kByteSeparator);
}

TEST(Dataset, ByteLevelFile) {
  TempDir dir;
  write_file(dir.file("a.txt"), "hi\xff\n");
  auto ds = TokenDataset::load({.path = dir.file("a.txt")});
  EXPECT_EQ(stream_of(*ds), (std::vector<int32_t>{'h', 'i', 0xff, '\n', 256}));
  EXPECT_EQ(ds->num_documents(), 1);
  EXPECT_EQ(ds->vocab_size(), 257);
  EXPECT_EQ(ds->separator_id(), 256);
  EXPECT_EQ(ds->files(), std::vector<std::string>{dir.file("a.txt")});
  // Byte-level round trip: any bytes, the separator decodes as a newline.
  EXPECT_EQ(ds->encode("a\xc3"), (std::vector<int32_t>{'a', 0xc3}));
  EXPECT_EQ(ds->decode({'a', 256, 0xc3, 'b'}),
            "a\n\xc3"
            "b");
  EXPECT_THROW_MSG(ds->decode({'a', 300}), ValueError, "[data]", "300");
  EXPECT_THROW_MSG(ds->decode({-1}), ValueError, "[data]", "-1");
}

TEST(Dataset, DocSeparatorSplitsAndDropsEmptyDocuments) {
  TempDir dir;
  write_file(dir.file("a.txt"), "||one||two||||three||");
  auto ds = TokenDataset::load({.path = dir.file("a.txt"), .doc_separator = "||"});
  std::vector<int32_t> want;
  for (const char* doc : {"one", "two", "three"}) append_byte_doc(want, doc);
  EXPECT_EQ(stream_of(*ds), want);
  EXPECT_EQ(ds->num_documents(), 3);
  // Without a separator the whole file is one document, separators included.
  auto whole = TokenDataset::load({.path = dir.file("a.txt")});
  want.clear();
  append_byte_doc(want, "||one||two||||three||");
  EXPECT_EQ(stream_of(*whole), want);
  EXPECT_EQ(whole->num_documents(), 1);
}

TEST(Dataset, DirectoryIsReadRecursivelyInPathOrder) {
  TempDir dir;
  // Path order: "B.txt" < "a/b/c.txt" < "a/z.txt" < "b.txt" (byte order, uppercase first).
  write_file(dir.file("b.txt"), "4");
  write_file(dir.file("a/z.txt"), "3");
  write_file(dir.file("a/b/c.txt"), "2");
  write_file(dir.file("B.txt"), "1");
  write_file(dir.file("empty.txt"), "");
  std::filesystem::create_directories(dir.file("sub/nothing"));
  auto ds = TokenDataset::load({.path = dir.file("")});
  EXPECT_EQ(stream_of(*ds), (std::vector<int32_t>{'1', 256, '2', 256, '3', 256, '4', 256}));
  EXPECT_EQ(ds->num_documents(), 4);  // the empty file has no document
  ASSERT_EQ(ds->files().size(), 5u);
  EXPECT_EQ(ds->files()[0], dir.file("B.txt"));
  EXPECT_EQ(ds->files()[1], dir.file("a/b/c.txt"));
  EXPECT_EQ(ds->files()[4], dir.file("empty.txt"));
}

// Expected ids come from the Python `tokenizers` library (tests/io/fixtures/*.expected.json).
struct PythonCase {
  std::string text;
  std::vector<int32_t> ids;  // without special tokens
};

std::vector<PythonCase> python_cases(const std::string& name, const std::string& avoid) {
  io::Json expected = io::read_json_file(std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/" +
                                         name + ".expected.json");
  std::vector<PythonCase> cases;
  for (const io::Json& c : expected.at("encode").elements()) {
    PythonCase pc{c.get_string("text"), {}};
    if (pc.text.empty() || pc.text.find(avoid) != std::string::npos) continue;
    for (const io::Json& v : c.at("ids_no_special").elements())
      pc.ids.push_back(static_cast<int32_t>(v.as_int()));
    cases.push_back(std::move(pc));
  }
  return cases;
}

// Documents spread over two files, split at a separator string, each followed by the separator
// token: the stream must equal Python's ids document by document.
void check_bpe_stream(const std::string& name, const std::string& separator_token,
                      int32_t want_separator_id) {
  SCOPED_TRACE(name);
  const std::string sep = "\x1e\x1e";
  std::vector<PythonCase> cases = python_cases(name, sep);
  ASSERT_GT(cases.size(), 20u);
  TempDir dir;
  std::string file_a, file_b;
  std::vector<int32_t> want;
  for (size_t i = 0; i < cases.size(); ++i) {
    (i < cases.size() / 2 ? file_a : file_b) += cases[i].text + sep;
    want.insert(want.end(), cases[i].ids.begin(), cases[i].ids.end());
    want.push_back(want_separator_id);
  }
  write_file(dir.file("corpus/0.txt"), file_a);
  write_file(dir.file("corpus/1.txt"), file_b);
  auto ds = TokenDataset::load({.path = dir.file("corpus"),
                                .tokenizer = tokenizer_fixture(name),
                                .doc_separator = sep,
                                .separator_token = separator_token});
  EXPECT_EQ(ds->separator_id(), want_separator_id);
  EXPECT_EQ(ds->num_documents(), static_cast<int64_t>(cases.size()));
  EXPECT_EQ(stream_of(*ds), want);
  EXPECT_EQ(ds->encode(cases[2].text), cases[2].ids);
  EXPECT_EQ(ds->decode(ds->encode("Hello world")), "Hello world");
}

TEST(Dataset, BpeMatchesPythonIdsWithAutoSeparator) {
  check_bpe_stream("gpt2", "", 0);    // <|endoftext|>
  check_bpe_stream("llama3", "", 1);  // no <|endoftext|> or </s>: <|end_of_text|>
}

TEST(Dataset, BpeExplicitSeparatorToken) {
  check_bpe_stream("qwen2", "<|im_end|>", 2);
}

TEST(Dataset, BpeVocabSizeCountsAddedTokens) {
  TempDir dir;
  write_file(dir.file("a.txt"), "x");
  auto ds =
      TokenDataset::load({.path = dir.file("a.txt"), .tokenizer = tokenizer_fixture("llama3")});
  EXPECT_EQ(ds->vocab_size(), 701);  // model ids 0..699 plus the added token 700
}

// Many documents over several encode batches: the stream equals the documents encoded one by one
// and does not depend on the thread count.
TEST(Dataset, BpeStreamIndependentOfThreads) {
  const std::string sep = "\x1e\x1e";
  std::vector<PythonCase> cases = python_cases("qwen2", sep);
  TempDir dir;
  std::string text;
  std::vector<int32_t> want;
  for (int rep = 0; text.size() < (size_t{3} << 18); ++rep) {
    for (const PythonCase& c : cases) {
      text += c.text + sep;
      want.insert(want.end(), c.ids.begin(), c.ids.end());
      want.push_back(0);
    }
  }
  write_file(dir.file("big.txt"), text);
  DatasetOptions o{
      .path = dir.file("big.txt"), .tokenizer = tokenizer_fixture("qwen2"), .doc_separator = sep};
  const int saved = num_threads();
  set_num_threads(1);
  auto one = TokenDataset::load(o);
  set_num_threads(3);
  auto three = TokenDataset::load(o);
  set_num_threads(saved);
  EXPECT_EQ(stream_of(*one), want);
  EXPECT_EQ(stream_of(*three), want);
}

// The bundled corpus, byte-level: every byte plus one separator.
TEST(Dataset, BundledCorpusByteLevel) {
  const std::string path = std::string(HP_TEST_DIR) + "/../../data/kjv.txt";
  auto ds = TokenDataset::load({.path = path});
  std::string bytes = detail::read_file(path);
  ASSERT_GT(bytes.size(), 4000000u);
  ASSERT_EQ(ds->size(), static_cast<int64_t>(bytes.size()) + 1);
  EXPECT_EQ(ds->tokens(ds->size() - 1, 1)[0], 256);
  EXPECT_EQ(ds->decode(ds->tokens(0, 200)), bytes.substr(0, 200));
}

TEST(Dataset, TokenFilesRoundTrip) {
  TempDir dir;
  std::vector<uint16_t> u16{5, 0, 65535, 7};
  write_tokens(dir.file("t16.bin"), u16);
  auto ds16 =
      TokenDataset::load({.path = dir.file("t16.bin"), .format = DatasetFormat::tokens_u16});
  EXPECT_EQ(stream_of(*ds16), (std::vector<int32_t>{5, 0, 65535, 7}));
  EXPECT_EQ(ds16->vocab_size(), 65536);
  EXPECT_EQ(ds16->separator_id(), -1);
  EXPECT_EQ(ds16->num_documents(), 1);

  // A directory of u32 files concatenates in path order.
  const uint32_t big = std::numeric_limits<int32_t>::max();
  write_tokens(dir.file("t32/b.bin"), std::vector<uint32_t>{3, 4});
  write_tokens(dir.file("t32/a.bin"), std::vector<uint32_t>{100000, big, 1});
  auto ds32 = TokenDataset::load({.path = dir.file("t32"), .format = DatasetFormat::tokens_u32});
  EXPECT_EQ(stream_of(*ds32), (std::vector<int32_t>{100000, static_cast<int32_t>(big), 1, 3, 4}));
  EXPECT_EQ(ds32->vocab_size(), int64_t{big} + 1);
  EXPECT_EQ(ds32->num_documents(), 2);
  EXPECT_THROW_MSG(ds32->encode("x"), ValueError, "[data]", "tokens_u32");
  EXPECT_THROW_MSG(ds32->decode({1}), ValueError, "[data]", "tokens_u32");
}

// data.format indexed: the .bin read front to back through the mapping, with the tokenizer's
// vocabulary and separator; nothing of it held in memory.
TEST(Dataset, IndexedIsTheBinFrontToBack) {
  auto ds =
      TokenDataset::load({.path = indexed_fixture("corpus"), .format = DatasetFormat::indexed});
  auto text = TokenDataset::load({.path = indexed_fixture("corpus.txt"), .doc_separator = "\n\n"});
  EXPECT_TRUE(ds->mapped());
  EXPECT_FALSE(text->mapped());
  EXPECT_EQ(stream_of(*ds), stream_of(*text));
  EXPECT_EQ(ds->num_documents(), 4);
  EXPECT_EQ(ds->vocab_size(), 257);
  EXPECT_EQ(ds->separator_id(), 256);
  EXPECT_EQ(ds->files(), (std::vector<std::string>{indexed_fixture("corpus.bin"),
                                                   indexed_fixture("corpus.idx")}));
  EXPECT_EQ(ds->decode(ds->tokens(0, 16)), "In the beginning");
  EXPECT_EQ(ds->encode("In"), (std::vector<int32_t>{'I', 'n'}));
  std::vector<int64_t> row(5);
  ds->read(3, 5, row.data());
  EXPECT_EQ(row, (std::vector<int64_t>{'t', 'h', 'e', ' ', 'b'}));
  EXPECT_THROW_MSG(ds->read(ds->size() - 2, 3, row.data()), ValueError, "[data]", "outside");
  EXPECT_THROW_MSG(ds->find_id_at_least(10), ValueError, "[data]", "not scanned");
}

TEST(DatasetErrors, IndexedIdsOutsideTheVocabularyAreNamedWhenRead) {
  // The u16 fixture holds id 65535 (position 4): fine for no tokenizer at load, an error when that
  // window is read under the byte-level vocabulary, naming the id, its position and the remedy.
  auto ds = TokenDataset::load({.path = indexed_fixture("u16"), .format = DatasetFormat::indexed});
  std::vector<int64_t> row(4);
  ds->read(0, 4, row.data());
  EXPECT_EQ(row, (std::vector<int64_t>{1, 2, 3, 256}));
  EXPECT_THROW_MSG(ds->read(2, 4, row.data()), ValueError, "[data]", "u16", "token id 65535",
                   "position 4", "[0, 257)", "data.tokenizer");
  // Options of text datasets and float elements are refused at load.
  EXPECT_THROW_MSG(TokenDataset::load({.path = indexed_fixture("u16"),
                                       .format = DatasetFormat::indexed,
                                       .doc_separator = "\n"}),
                   ValueError, "[data]", "doc_separator", "indexed");
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.file("f"), IndexedDType::u16);
    w.add_document(std::vector<int32_t>{1, 2});
    w.finish();
  }
  std::string idx = read_bytes(dir.file("f.idx"));
  idx[17] = 7;  // float32: 2 elements of 4 bytes
  write_file(dir.file("f.idx"), idx);
  write_file(dir.file("f.bin"), std::string(8, '\0'));
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("f"), .format = DatasetFormat::indexed}),
                   IoError, "[data]", "float32", "not token ids");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("nope"), .format = DatasetFormat::indexed}),
                   IoError, "[data]", "nope.idx", "does not exist");
}

TEST(Dataset, CompressedTextFilesAreDecompressed) {
  // read_input is what the text loader reads through: a .gz that is really plain text fails by
  // name instead of being tokenized as bytes.
  TempDir dir;
  write_file(dir.file("a.txt.gz"), "plain");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("a.txt.gz")}), IoError, "[data]",
                   "a.txt.gz", "gzip");
}

TEST(DatasetErrors, MissingAndEmptyPaths) {
  TempDir dir;
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("nope.txt")}), IoError, "[data]",
                   "nope.txt", "does not exist");
  const std::string empty = dir.file("empty"), fifo = dir.file("fifo");
  std::filesystem::create_directories(empty + "/sub");
  EXPECT_THROW_MSG(TokenDataset::load({.path = empty}), IoError, "[data]", empty.c_str(),
                   "no regular files");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW_MSG(TokenDataset::load({.path = fifo}), IoError, "[data]", fifo.c_str(),
                   "not a regular file");
}

TEST(DatasetErrors, UnreadableFile) {
  TempDir dir;
  const std::string d = dir.file("d"), gone = dir.file("gone");
  std::filesystem::create_directories(d);
  // A directory opens but cannot be read (works as root too, unlike a chmod 000 file).
  EXPECT_THROW_MSG(detail::read_file(d), IoError, "[data]", d.c_str(), "cannot read");
  EXPECT_THROW_MSG(detail::read_file(gone), IoError, "[data]", gone.c_str(), "cannot open");
}

TEST(DatasetErrors, TokenFileSizes) {
  TempDir dir;
  write_file(dir.file("odd.bin"), "abc");
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("odd.bin"), .format = DatasetFormat::tokens_u16}),
      IoError, "[data]", "odd.bin", "3 bytes", "multiple of 2");
  write_file(dir.file("five.bin"), "abcde");
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("five.bin"), .format = DatasetFormat::tokens_u32}),
      IoError, "[data]", "five.bin", "5 bytes", "multiple of 4");
  write_tokens(dir.file("huge.bin"), std::vector<uint32_t>{1, 4294967295u});
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("huge.bin"), .format = DatasetFormat::tokens_u32}),
      IoError, "[data]", "huge.bin", "4294967295", "index 1");
}

TEST(DatasetErrors, Options) {
  TempDir dir;
  write_file(dir.file("a.txt"), "abc");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("a.txt"),
                                       .format = DatasetFormat::tokens_u16,
                                       .tokenizer = tokenizer_fixture("gpt2")}),
                   ValueError, "[data]", "tokenizer", "tokens_u16");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("a.txt"), .separator_token = "</s>"}),
                   ValueError, "[data]", "</s>", "byte-level");
}

TEST(DatasetErrors, Tokenizer) {
  TempDir dir;
  write_file(dir.file("a.txt"), "abc");
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("a.txt"), .tokenizer = dir.file("missing.json")}),
      IoError, "[data]", "missing.json", "cannot load tokenizer");
  write_file(dir.file("bad.json"), "{\"model\": ");
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("a.txt"), .tokenizer = dir.file("bad.json")}), IoError,
      "[data]", "bad.json", "[json]");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("a.txt"),
                                       .tokenizer = tokenizer_fixture("gpt2"),
                                       .separator_token = "<nope>"}),
                   ValueError, "[data]", "<nope>", "gpt2.tokenizer.json");
  // A tokenizer with none of the automatic separators: the error lists them all.
  std::string json = detail::read_file(tokenizer_fixture("gpt2"));
  for (size_t at; (at = json.find("<|endoftext|>")) != std::string::npos;)
    json.replace(at, 13, "<|end-of-doc|>");
  write_file(dir.file("nosep.json"), json);
  EXPECT_THROW_MSG(
      TokenDataset::load({.path = dir.file("a.txt"), .tokenizer = dir.file("nosep.json")}),
      ValueError, "[data]", "nosep.json", "<|endoftext|>, </s>, <|end_of_text|>, <|im_end|>, <eos>",
      "separator_token");
  auto ok = TokenDataset::load({.path = dir.file("a.txt"),
                                .tokenizer = dir.file("nosep.json"),
                                .separator_token = "<|end-of-doc|>"});
  EXPECT_EQ(ok->tokens(ok->size() - 1, 1)[0], 0);
}

TEST(DatasetErrors, InvalidUtf8UnderTokenizer) {
  TempDir dir;
  write_file(dir.file("a.txt"), "fine##bad \xff text");
  EXPECT_THROW_MSG(TokenDataset::load({.path = dir.file("a.txt"),
                                       .tokenizer = tokenizer_fixture("gpt2"),
                                       .doc_separator = "##"}),
                   ValueError, "[data]", "a.txt", "document at byte 6", "UTF-8");
}

}  // namespace
}  // namespace hp::data
