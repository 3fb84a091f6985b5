// Megatron's indexed dataset layout: our writer's files equal, byte for byte, the fixtures that
// tools/make_indexed_fixture.py writes from the format description; the reader reads them back;
// every inconsistency of a corrupt or truncated .idx / .bin is an error naming the file and value.
#include "hp/data/indexed.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "data/data_test_util.h"
#include "hp/io/json.h"

namespace hp::data {
namespace {

namespace fs = std::filesystem;
using test::indexed_fixture;
using test::read_bytes;
using test::TempDir;
using test::write_file;

using Document = std::vector<std::vector<int32_t>>;  // sequences of ids

struct FixtureSet {
  IndexedDType dtype;
  std::vector<Document> documents;
};

FixtureSet manifest(const std::string& name) {
  const io::Json j =
      io::parse_json(read_bytes(indexed_fixture("manifest.json")), "manifest.json").at(name);
  FixtureSet set{static_cast<IndexedDType>(j.get_int("dtype_code")), {}};
  for (const io::Json& doc : j.at("documents").elements()) {
    Document& d = set.documents.emplace_back();
    for (const io::Json& seq : doc.elements()) {
      const std::vector<int64_t> ids = seq.as_int_list();
      d.emplace_back(ids.begin(), ids.end());
    }
  }
  return set;
}

void write_documents(const std::string& prefix, const FixtureSet& set) {
  IndexedDatasetWriter w(prefix, set.dtype);
  for (const Document& doc : set.documents) {
    std::vector<int32_t> ids, lengths;
    for (const auto& seq : doc) {
      ids.insert(ids.end(), seq.begin(), seq.end());
      lengths.push_back(static_cast<int32_t>(seq.size()));
    }
    // A document of one sequence goes through the one-sequence form (no lengths given).
    if (doc.size() == 1) lengths.clear();
    w.add_document(ids, lengths);
  }
  w.finish();
}

TEST(Indexed, WriterEqualsFixtureByteForByte) {
  for (const char* name : {"u16", "i32", "corpus"}) {
    TempDir dir;
    const std::string prefix = dir.file(name);
    write_documents(prefix, manifest(name));
    for (const char* ext : {".bin", ".idx"}) {
      const std::string ours = read_bytes(prefix + ext);
      const std::string want = read_bytes(indexed_fixture(std::string(name) + ext));
      ASSERT_FALSE(want.empty()) << name << ext;
      EXPECT_EQ(ours, want) << name << ext << " differs from the fixture";
    }
    // Only the dataset is left: no partial or side files.
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.file("")), fs::directory_iterator{}), 2)
        << name;
  }
}

TEST(Indexed, ReaderReadsFixtures) {
  for (const char* name : {"u16", "i32", "corpus"}) {
    const FixtureSet set = manifest(name);
    const auto ds = IndexedDataset::open(indexed_fixture(name));
    EXPECT_EQ(ds->dtype(), set.dtype) << name;
    EXPECT_EQ(ds->num_documents(), static_cast<int64_t>(set.documents.size())) << name;
    std::vector<int64_t> stream;
    int64_t seq = 0;
    for (size_t d = 0; d < set.documents.size(); ++d) {
      EXPECT_EQ(ds->document_index(static_cast<int64_t>(d)), seq) << name << " document " << d;
      for (const auto& want : set.documents[d]) {
        EXPECT_EQ(ds->sequence(seq), std::vector<int64_t>(want.begin(), want.end()))
            << name << " sequence " << seq;
        stream.insert(stream.end(), want.begin(), want.end());
        ++seq;
      }
    }
    EXPECT_EQ(ds->num_sequences(), seq) << name;
    EXPECT_EQ(ds->document_index(ds->num_documents()), seq) << name;
    ASSERT_EQ(ds->num_tokens(), static_cast<int64_t>(stream.size())) << name;
    // The token stream, whole and from the middle.
    std::vector<int64_t> got(stream.size());
    ds->read(0, ds->num_tokens(), got.data());
    EXPECT_EQ(got, stream) << name;
    if (stream.size() > 3) {
      got.assign(2, -1);
      ds->read(1, 2, got.data());
      EXPECT_EQ(got, (std::vector<int64_t>{stream[1], stream[2]})) << name;
    }
  }
  // The extremes of each dtype survive: 65535 as uint16, INT32_MAX as int32.
  EXPECT_EQ(IndexedDataset::open(indexed_fixture("u16"))->sequence(1),
            (std::vector<int64_t>{65535, 0}));
  EXPECT_EQ(IndexedDataset::open(indexed_fixture("i32"))->sequence(0),
            (std::vector<int64_t>{100000, 2147483647, 0}));
}

TEST(Indexed, ReadRangeAndDtypeErrors) {
  const auto ds = IndexedDataset::open(indexed_fixture("u16"));
  int64_t out[8];
  EXPECT_THROW_MSG(ds->read(-1, 2, out), ValueError, "[data]", "u16", "[-1, 1)");
  EXPECT_THROW_MSG(ds->read(ds->num_tokens() - 1, 2, out), ValueError, "[data]", "outside");
  // Float elements are not token ids.
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.file("f"), IndexedDType::u16);
    w.add_document(std::vector<int32_t>{1, 2});
    w.finish();
  }
  std::string idx = read_bytes(dir.file("f.idx"));
  idx[17] = 7;  // float32: the 4-byte elements no longer match the 2 × 2 bytes of .bin
  write_file(dir.file("f.idx"), idx);
  EXPECT_THROW_MSG(IndexedDataset::open(dir.file("f")), IoError, "[data]", "f.bin", "4 bytes",
                   "ends at byte 8");
  write_file(dir.file("f.bin"), std::string(8, '\0'));
  EXPECT_THROW_MSG(IndexedDataset::open(dir.file("f"))->read(0, 1, out), IoError, "[data]",
                   "float32", "not token ids");
  EXPECT_THROW_MSG(IndexedDatasetWriter(dir.file("g"), IndexedDType::u16)
                       .add_document(std::vector<int32_t>{70000}),
                   ValueError, "[data]", "70000", "uint16");
  EXPECT_THROW_MSG(IndexedDatasetWriter(dir.file("g"), IndexedDType::u16)
                       .add_document(std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{1, 1}),
                   ValueError, "[data]", "sum to 2", "3 ids");
}

// The u16 fixture with one change to its index (byte offset, new bytes).
class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    idx_ = read_bytes(indexed_fixture("u16.idx"));
    bin_ = read_bytes(indexed_fixture("u16.bin"));
    ASSERT_EQ(idx_.size(), 34u + 12 * 6 + 8 * 6);
  }
  // Writes the dataset with idx_ / bin_ as they are now and expects IoError with the needles.
  template <class... Needles>
  void expect_error(Needles... needles) {
    const std::string prefix = dir_.file("d") + std::to_string(n_++);
    write_file(prefix + ".idx", idx_);
    write_file(prefix + ".bin", bin_);
    EXPECT_THROW_MSG(IndexedDataset::open(prefix), IoError, "[data]", needles...);
    idx_ = read_bytes(indexed_fixture("u16.idx"));
    bin_ = read_bytes(indexed_fixture("u16.bin"));
  }
  template <class T>
  void poke(size_t at, T v) {
    std::memcpy(idx_.data() + at, &v, sizeof v);
  }
  static constexpr size_t kLengths = 34, kPointers = 34 + 4 * 6, kDocs = 34 + 12 * 6;
  TempDir dir_;
  int n_ = 0;
  std::string idx_, bin_;
};

TEST_F(CorruptIndex, Header) {
  idx_[0] = 'X';
  expect_error(".idx", "magic", "58 4d 49");
  poke<uint64_t>(9, 2);
  expect_error(".idx", "version 2");
  idx_[17] = 9;
  expect_error(".idx", "dtype code 9");
  idx_.resize(20);
  expect_error(".idx", "20 bytes", "34-byte header");
  idx_.clear();
  expect_error(".idx", "0 bytes");
}

TEST_F(CorruptIndex, CountsAgainstTheFileSize) {
  poke<uint64_t>(18, 7);  // one sequence more than the arrays hold
  expect_error(".idx", "7 sequences", "6 document boundaries");
  poke<uint64_t>(18, uint64_t{1} << 62);  // the product would overflow 64 bits
  expect_error(".idx", "4611686018427387904 sequences");
  idx_.resize(idx_.size() - 8);  // truncated: the last document index is cut off
  expect_error(".idx", "146 bytes", "need 154");
  idx_ += std::string(6, '\0');  // trailing sequence modes: a multimodal dataset
  expect_error(".idx", "multimodal");
  idx_ += "xy";
  expect_error(".idx", "156 bytes", "make 154");
  poke<uint64_t>(26, 0);
  poke<uint64_t>(18, 0);
  idx_.resize(34);
  bin_.clear();
  expect_error(".idx", "document count 0");
}

TEST_F(CorruptIndex, LengthsAndPointers) {
  poke<int32_t>(kLengths + 4 * 2, -3);
  expect_error(".idx", "sequence 2 has negative length -3");
  poke<int64_t>(kPointers + 8 * 0, 2);
  expect_error(".idx", "sequence 0 points at byte 2", "starts at 0");
  poke<int64_t>(kPointers + 8 * 3, 100);
  expect_error(".idx", "sequence 3 points at byte 100", "sequence 2 ends at byte 14");
  poke<int32_t>(kLengths + 4 * 2, 3);  // lengths no longer match the pointers after it
  expect_error(".idx", "sequence 3 points at byte 14", "sequence 2 ends at byte 18");
}

TEST_F(CorruptIndex, BinSize) {
  bin_.resize(bin_.size() - 2);
  expect_error(".bin", "18 bytes", "sequence 5", "ends at byte 20", "truncated");
  bin_ += "zz";
  expect_error(".bin", "22 bytes", "describes 20", "do not belong together");
}

TEST_F(CorruptIndex, DocumentIndices) {
  poke<int64_t>(kDocs, 1);
  expect_error(".idx", "document index 0 is 1, expected 0");
  poke<int64_t>(kDocs + 8 * 3, 0);
  expect_error(".idx", "document index 3 is 0", "never decrease");
  poke<int64_t>(kDocs + 8 * 5, 5);
  expect_error(".idx", "last document index is 5", "sequence count 6");
  poke<int64_t>(kDocs + 8 * 4, 9);
  expect_error(".idx", "document index 4 is 9");
}

TEST(Indexed, MissingFilesNameWhatIsMissing) {
  TempDir dir;
  EXPECT_THROW_MSG(IndexedDataset::open(dir.file("none")), IoError, "[data]", "none.idx",
                   "does not exist", "PREFIX");
  write_file(dir.file("a.bin"), "");
  EXPECT_THROW_MSG(IndexedDataset::open(dir.file("a")), IoError, "[data]", "a.idx", "incomplete");
  write_file(dir.file("b.idx"), read_bytes(indexed_fixture("u16.idx")));
  EXPECT_THROW_MSG(IndexedDataset::open(dir.file("b")), IoError, "[data]", "b.bin",
                   "does not exist");
}

// A writer that is not finished leaves no PREFIX.idx: the dataset cannot be opened and says it
// is incomplete; a new writer resumed at a flushed position continues to the same files as an
// uninterrupted one; discard() removes the partial files.
TEST(Indexed, WriterIsCrashSafeAndResumable) {
  TempDir dir;
  const FixtureSet set = manifest("u16");
  const std::string prefix = dir.file("u16");
  IndexedDatasetWriter::Position at;
  {
    IndexedDatasetWriter w(prefix, set.dtype);
    std::vector<int32_t> ids = {1, 2, 3, 256};
    w.add_document(ids);
    w.add_document({});
    at = w.flush();
    EXPECT_EQ(at, (IndexedDatasetWriter::Position{4, 1, 2}));
    // Written after the flush, then lost in the "crash": the resume cuts it off (it is longer
    // than what the resume writes after it, so a tail would remain otherwise).
    w.add_document(std::vector<int32_t>(100, 9));
    w.flush();
  }
  EXPECT_FALSE(fs::exists(prefix + ".idx"));
  EXPECT_FALSE(fs::exists(prefix + ".bin"));
  EXPECT_TRUE(fs::exists(prefix + ".idx.partial"));
  EXPECT_THROW_MSG(IndexedDataset::open(prefix), IoError, "[data]", "incomplete", "u16.idx.partial",
                   "resume");
  {
    IndexedDatasetWriter w(prefix, set.dtype, at);
    for (size_t d = 2; d < set.documents.size(); ++d) {
      std::vector<int32_t> ids, lengths;
      for (const auto& seq : set.documents[d]) {
        ids.insert(ids.end(), seq.begin(), seq.end());
        lengths.push_back(static_cast<int32_t>(seq.size()));
      }
      w.add_document(ids, lengths);
    }
    w.finish();
  }
  EXPECT_EQ(read_bytes(prefix + ".idx"), read_bytes(indexed_fixture("u16.idx")));
  EXPECT_EQ(read_bytes(prefix + ".bin"), read_bytes(indexed_fixture("u16.bin")));
  EXPECT_FALSE(fs::exists(prefix + ".idx.partial"));
  EXPECT_FALSE(fs::exists(prefix + ".docs.partial"));

  // A resume position beyond what the partial files hold is refused.
  {
    IndexedDatasetWriter w(dir.file("short"), IndexedDType::u16);
    w.add_document(std::vector<int32_t>{1});
    w.flush();
  }
  EXPECT_THROW_MSG(IndexedDatasetWriter(dir.file("short"), IndexedDType::u16,
                                        IndexedDatasetWriter::Position{5, 1, 1}),
                   IoError, "[data]", "short.bin.partial", "2 bytes", "fewer than the 10");
  {
    IndexedDatasetWriter w(dir.file("gone"), IndexedDType::u16);
    w.add_document(std::vector<int32_t>{1});
    w.discard();
  }
  for (const char* f : {"gone.bin.partial", "gone.idx.partial", "gone.docs.partial"})
    EXPECT_FALSE(fs::exists(dir.file(f))) << f;
}

// finish() replaces an existing dataset at the prefix (its old .idx goes first).
TEST(Indexed, FinishReplacesAnOldDataset) {
  TempDir dir;
  write_documents(dir.file("d"), manifest("i32"));
  write_documents(dir.file("d"), manifest("u16"));
  EXPECT_EQ(read_bytes(dir.file("d.idx")), read_bytes(indexed_fixture("u16.idx")));
  EXPECT_EQ(IndexedDataset::open(dir.file("d"))->dtype(), IndexedDType::u16);
}

TEST(Indexed, DtypeForVocabIsMegatrons) {
  EXPECT_EQ(indexed_dtype_for_vocab(257), IndexedDType::u16);
  EXPECT_EQ(indexed_dtype_for_vocab(65499), IndexedDType::u16);
  EXPECT_EQ(indexed_dtype_for_vocab(65500), IndexedDType::i32);
  EXPECT_EQ(indexed_dtype_for_vocab(151936), IndexedDType::i32);
  EXPECT_STREQ(indexed_dtype_name(IndexedDType::u16), "uint16");
  EXPECT_EQ(indexed_dtype_size(IndexedDType::f64), 8);
}

}  // namespace
}  // namespace hp::data
