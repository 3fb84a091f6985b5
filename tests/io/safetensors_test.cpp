#include "hp/io/safetensors.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "io/io_test_util.h"

namespace hp::io {
namespace {

using test::fixture;
using test::TempDir;

// A safetensors file image: u64 LE header length, header, data.
std::string image(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

SafetensorsFile parse(const std::string& img) {
  return SafetensorsFile::parse(img.data(), img.size(), "mem.safetensors");
}

// The fixture convention: tensor "<DTYPE>" = arange(6) * 0.5 as [2, 3] (ints and bool differ).
double expected_value(const std::string& dtype, int i) {
  if (dtype == "BOOL") return i % 2;
  if (dtype == "I64" || dtype == "I32" || dtype == "U8") return i;
  return i * 0.5;
}

const char* kAllDTypes[] = {"F64",     "F32", "BF16", "F16", "F8_E4M3",
                            "F8_E5M2", "I64", "I32",  "U8",  "BOOL"};

void expect_fixture_tensor(const SafetensorsTensor& t, const std::string& dtype) {
  EXPECT_EQ(t.dtype, safetensors_dtype_from_name(dtype)) << t.name;
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3})) << t.name;
  ASSERT_EQ(t.nbytes, 6 * dtype_size(t.dtype)) << t.name;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype), 0u) << t.name;
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(load_as_double(t.data + i * dtype_size(t.dtype), t.dtype), expected_value(dtype, i))
        << t.name << "[" << i << "]";
}

TEST(Safetensors, ReadsFilesWrittenByPython) {
  auto f = SafetensorsFile::open(fixture("safetensors/py_all_dtypes.safetensors"));
  for (const char* dt : kAllDTypes) expect_fixture_tensor(f.tensor(dt), dt);
  EXPECT_EQ(f.tensor("empty").shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(f.tensor("empty").nbytes, 0u);
  const auto& s = f.tensor("scalar");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(load_as_double(s.data, DType::f32), 3.25);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "hp fixture");
  EXPECT_THROW_MSG(f.tensor("nope"), IoError, "py_all_dtypes.safetensors", "'nope'");
}

TEST(Safetensors, ReadsShardedCheckpoint) {
  for (std::string path : {fixture("safetensors/py_sharded"),
                           fixture("safetensors/py_sharded/model.safetensors.index.json")}) {
    auto ck = SafetensorsCheckpoint::open(path);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a.weight", "b.bias", "c.weight"}));
    EXPECT_EQ(ck.files().size(), 2u);
    expect_fixture_tensor(ck.tensor("a.weight"), "F32");
    expect_fixture_tensor(ck.tensor("b.bias"), "BF16");
    expect_fixture_tensor(ck.tensor("c.weight"), "F16");
    EXPECT_THROW_MSG(ck.tensor("d"), IoError, "'d'");
  }
  auto single = SafetensorsCheckpoint::open(fixture("safetensors/py_all_dtypes.safetensors"));
  EXPECT_TRUE(single.contains("BF16"));
}

TEST(Safetensors, ShardedIndexErrors) {
  TempDir dir;
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"x": "../evil"}})";
  EXPECT_THROW_MSG(SafetensorsCheckpoint::open(dir.file("")), IoError, "weight_map.x",
                   "plain file name");
  std::string img = image(R"({"y":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "a");
  std::ofstream(dir.file("s.safetensors"), std::ios::binary) << img;
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"weight_map": {"x": "s.safetensors"}})";
  EXPECT_THROW_MSG(SafetensorsCheckpoint::open(dir.file("")), IoError, "'x'", "s.safetensors");
  EXPECT_THROW_MSG(SafetensorsCheckpoint::open(dir.file("missing")), IoError, "missing");
}

// Writes one tensor of every dtype (fixture values), reads it back, and compares bytes.
TEST(Safetensors, RoundTrip) {
  TempDir dir;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<SafetensorsEntry> entries;
  for (const char* name : kAllDTypes) {
    DType dt = safetensors_dtype_from_name(name);
    std::vector<std::byte> buf(6 * dtype_size(dt));
    for (int i = 0; i < 6; ++i)
      store_from_double(buf.data() + i * dtype_size(dt), dt, expected_value(name, i));
    entries.push_back({name, dt, {2, 3}, buf.data(), buf.size()});
    buffers.push_back(std::move(buf));
  }
  entries.push_back({"empty", DType::f32, {0, 4}, nullptr, 0});
  std::map<std::string, std::string> meta{{"writer", "hp"}, {"purpose", "interop"}};
  // HP_SAFETENSORS_DUMP=<file> keeps a copy for tools/make_safetensors_fixtures.py --check.
  std::string path = std::getenv("HP_SAFETENSORS_DUMP") ? std::getenv("HP_SAFETENSORS_DUMP")
                                                        : dir.file("rt.safetensors");
  auto ranges = write_safetensors(path, entries, meta);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), entries.size());
  for (size_t i = 0; i + 1 < entries.size(); ++i) {
    const auto& t = f.tensor(entries[i].name);
    expect_fixture_tensor(t, kAllDTypes[i]);
    EXPECT_EQ(std::memcmp(t.data, buffers[i].data(), t.nbytes), 0);
    EXPECT_EQ(ranges.at(t.name), std::make_pair(t.file_offset, t.file_offset + t.nbytes));
  }
  // The header is padded so the data region starts 8-byte aligned.
  EXPECT_EQ(f.tensors().front().file_offset % 8, 0u);
}

TEST(Safetensors, StreamingWriterMatchesOneShotWriter) {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {7, 8, 9};
  const std::vector<SafetensorsEntry> entries = {{"b", DType::bf16, {3}, b.data(), 6},
                                                 {"a", DType::f32, {2, 3}, a.data(), 24}};
  write_safetensors(dir.file("one.safetensors"), entries, {{"k", "v"}});
  SafetensorsWriter w(dir.file("stream.safetensors"), entries, {{"k", "v"}});
  ASSERT_EQ(w.layout().size(), 2u);
  EXPECT_EQ(w.layout()[0].name, "a");  // largest element size first
  EXPECT_EQ(w.layout()[0].end - w.layout()[0].begin, 24u);
  w.append(a.data(), 10);  // in arbitrary pieces
  w.append(reinterpret_cast<char*>(a.data()) + 10, 14);
  w.append(b.data(), 6);
  EXPECT_THROW_MSG(w.append(b.data(), 1), IoError, "stream.safetensors", "0 left");
  w.close(true);
  std::ifstream f1(dir.file("one.safetensors"), std::ios::binary),
      f2(dir.file("stream.safetensors"), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f1), {}),
            std::string(std::istreambuf_iterator<char>(f2), {}));
  EXPECT_EQ(SafetensorsFile::open(dir.file("stream.safetensors")).tensor("a").file_offset,
            w.layout()[0].begin);

  SafetensorsWriter short_w(dir.file("short.safetensors"), entries);
  short_w.append(a.data(), 24);
  EXPECT_THROW_MSG(short_w.close(), IoError, "short.safetensors", "closed after");
}

TEST(Safetensors, WriterRejectsBadEntries) {
  TempDir dir;
  float x[2] = {1, 2};
  auto write = [&](SafetensorsEntry e) { write_safetensors(dir.file("w.safetensors"), {e, e}); };
  EXPECT_THROW_MSG(write({"a", DType::f32, {3}, x, 8}), IoError, "'a'", "8 bytes");
  EXPECT_THROW_MSG(write({"a", DType::f32, {-2}, x, 8}), IoError, "negative dimension -2");
  EXPECT_THROW_MSG(write({"a", DType::f32, {2}, x, 8}), IoError, "duplicate tensor 'a'");
  EXPECT_THROW_MSG(write_safetensors("/nonexistent/dir/w.safetensors", {}), IoError,
                   "/nonexistent/dir/w.safetensors");
}

// A valid one-tensor header with the given dtype / shape / offsets JSON fragments.
std::string header(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

TEST(Safetensors, MalformedFiles) {
  EXPECT_THROW_MSG(parse("abc"), IoError, "mem.safetensors", "too small");
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32
  EXPECT_THROW_MSG(parse(huge), IoError, "mem.safetensors", "exceeds the 100000000-byte limit");
  std::string img = image("{}");
  img[0] = 100;
  EXPECT_THROW_MSG(parse(img), IoError, "header length 100 exceeds the file size");
  EXPECT_THROW_MSG(parse(image("{\"\xff\":1}")), IoError, "not valid UTF-8");
  EXPECT_THROW_MSG(parse(image("{\"t\": [1,}")), IoError, "mem.safetensors", "invalid JSON",
                   "line 1");
  EXPECT_THROW_MSG(parse(image("[]")), IoError, "does not start with '{'");
  EXPECT_THROW_MSG(parse(image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                               R"("t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                               "ab")),
                   IoError, "duplicate key \"t\"");
  EXPECT_THROW_MSG(parse(image(header("\"Q4\"", "[1]", "[0,1]"), "a")), IoError, "'t'",
                   "unknown dtype 'Q4'");
  EXPECT_THROW_MSG(parse(image(header("\"I16\"", "[1]", "[0,2]"), "ab")), IoError, "'t'",
                   "unsupported dtype 'I16'");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[1]", "[0,9]"), "a")), IoError, "'t'",
                   "out of range");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[1]", "[2,1]"), "ab")), IoError, "'t'",
                   "end 1 < begin 2");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[-1]", "[0,1]"), "a")), IoError, "'t'",
                   "negative dimension -1");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[1.5]", "[0,1]"), "a")), IoError, "'t'",
                   "dimension must be a non-negative integer");
  EXPECT_THROW_MSG(parse(image(header("\"F32\"", "[2]", "[0,4]"), "abcd")), IoError, "'t'",
                   "4 bytes in data_offsets but shape × F32 needs 8");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[1]", "[0,1]"), "ab")), IoError,
                   "cover 1 bytes of the 2-byte data region");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[1]", "[1,2]"), "ab")), IoError, "'t'",
                   "gap after offset 0");
  EXPECT_THROW_MSG(parse(image(header("\"U8\"", "[1]", "[0]"), "a")), IoError, "'t'",
                   "data_offsets must be [begin, end]");
  EXPECT_THROW_MSG(
      parse(image(header("\"U8\"", "[4294967296,4294967296,4294967296]", "[0,1]"), "a")), IoError,
      "'t'", "overflows");
  EXPECT_THROW_MSG(parse(image(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                               R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
                               "abc")),
                   IoError, "tensor 'b'", "overlaps tensor 'a'");
  EXPECT_THROW_MSG(parse(image(R"({"__metadata__":{"k":1}})")), IoError, "'k'", "string");
  EXPECT_THROW_MSG(
      parse(image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", "a")), IoError,
      "unexpected key 'x'");
  EXPECT_THROW_MSG(SafetensorsFile::open("/nonexistent.safetensors"), IoError,
                   "/nonexistent.safetensors", "cannot open");
}

TEST(Safetensors, AcceptsEdgeCases) {
  // Empty header object with no data, zero-size tensors sharing an offset, padding spaces.
  EXPECT_TRUE(parse(image("{}")).tensors().empty());
  // parse() does not copy: the image must outlive the views.
  std::string img = image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                          R"("b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                          R"("c":{"dtype":"BF16","shape":[0,3],"data_offsets":[2,2]}}    )",
                          "xy");
  auto f = parse(img);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensor("b").nbytes, 2u);
  EXPECT_EQ(static_cast<char>(f.tensor("b").data[1]), 'y');
}

}  // namespace
}  // namespace hp::io
