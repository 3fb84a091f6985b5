// Finding damage before a resume: checkpoint::verify and `hp ckpt verify` on a clean checkpoint,
// a truncated, a missing and a bit-flipped rank file, and a corrupted metadata.json (which
// protects itself with metadata_crc32c; checkpoints without that key still load).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/ckpt_test_util.h"
#include "cli_run.h"
#include "hp/io/json.h"
#include "io/io_test_util.h"

namespace hp::checkpoint {
namespace {

namespace fs = std::filesystem;
using io::test::TempDir;
using test::chunk_of;
using test::empty_chunk;

// w [6, 4] f32 in two row pieces, b [5] bf16 whole, a 0-d step counter: 4 pieces in one file.
std::string save_sample(const std::string& run) {
  const Tensor w = test::reference({6, 4}, DType::f32, 1);
  const Tensor b = test::reference({5}, DType::bf16, 2);
  return save(run, 3,
              {chunk_of("w", w, {0, 0}, {2, 4}),
               chunk_of("w", w, {2, 0}, {4, 4}),
               chunk_of("b", b, {0}, {5}),
               {"state.w.step", from_vector({9}, {}, DType::i64), {}, {}}},
              "{}", nullptr);
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

const TensorMeta& tensor(const Metadata& m, const std::string& fqn) {
  for (const TensorMeta& t : m.tensors)
    if (t.fqn == fqn) return t;
  throw std::runtime_error("no tensor " + fqn);
}

std::string faults_text(const std::vector<Fault>& faults) {
  std::string s;
  for (const Fault& f : faults) s += f.file + " | " + f.tensor + " | " + f.what + "\n";
  return s;
}

TEST(Verify, CleanCheckpointHasNoFaults) {
  TempDir tmp;
  const std::string dir = save_sample(tmp.file("run"));
  EXPECT_EQ(faults_text(verify(dir)), "");
  // metadata.json carries its own checksum.
  EXPECT_NE(read(dir + "/metadata.json").find("\"metadata_crc32c\""), std::string::npos);
}

TEST(Verify, FindsAFlippedByteInOnePiece) {
  TempDir tmp;
  const std::string dir = save_sample(tmp.file("run"));
  const TensorMeta::Piece p = tensor(read_metadata(dir), "w").pieces[1];  // rows 2..5
  {
    std::fstream f(dir + "/rank-00000.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(p.begin + 9));
    f.put('\x5a');
  }
  const std::vector<Fault> faults = verify(dir);
  ASSERT_EQ(faults.size(), 1u) << faults_text(faults);
  EXPECT_EQ(faults[0].file, "rank-00000.safetensors");
  EXPECT_EQ(faults[0].tensor, "w");
  EXPECT_NE(faults[0].what.find("checksum mismatch"), std::string::npos) << faults[0].what;
  EXPECT_NE(faults[0].what.find("offsets [2, 0]"), std::string::npos) << faults[0].what;
}

TEST(Verify, FindsTruncationAndAMissingRankFile) {
  TempDir tmp;
  const std::string dir = save_sample(tmp.file("run"));
  const std::string file = dir + "/rank-00000.safetensors";
  const TensorMeta::Piece last = tensor(read_metadata(dir), "w").pieces[1];
  // Cut inside w's second piece: it and every piece after it no longer fit.
  fs::resize_file(file, last.begin + 3);
  std::vector<Fault> faults = verify(dir);
  ASSERT_FALSE(faults.empty());
  bool w_cut = false;
  for (const Fault& f : faults) {
    EXPECT_EQ(f.file, "rank-00000.safetensors");
    EXPECT_NE(f.what.find("truncated"), std::string::npos) << f.what;
    w_cut |= f.tensor == "w" && f.what.find("offsets [2, 0]") != std::string::npos;
  }
  EXPECT_TRUE(w_cut) << faults_text(faults);

  fs::remove(file);
  faults = verify(dir);
  ASSERT_EQ(faults.size(), 1u) << faults_text(faults);
  EXPECT_EQ(faults[0].file, "rank-00000.safetensors");
  EXPECT_NE(faults[0].what.find("missing"), std::string::npos) << faults[0].what;
}

TEST(Verify, CorruptedMetadataIsAnErrorNamingIt) {
  TempDir tmp;
  const std::string dir = save_sample(tmp.file("run"));
  // Still valid JSON, and every strict check would pass: only the checksum can tell.
  std::string text = read(dir + "/metadata.json");
  const size_t at = text.find("\"step\": 3");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 8] = '4';
  write(dir + "/metadata.json", text);
  EXPECT_THROW_MSG(read_metadata(dir), IoError, "[ckpt] ", "metadata.json", "checksum mismatch");
  const std::vector<Fault> faults = verify(dir);
  ASSERT_EQ(faults.size(), 1u) << faults_text(faults);
  EXPECT_EQ(faults[0].file, "metadata.json");
  EXPECT_NE(faults[0].what.find("checksum mismatch"), std::string::npos) << faults[0].what;
}

TEST(Verify, MetadataWithoutChecksumStillLoads) {
  TempDir tmp;
  const std::string dir = save_sample(tmp.file("run"));
  io::JsonValue j = io::parse_json_value(read(dir + "/metadata.json"), "metadata.json");
  ASSERT_TRUE(j.erase("metadata_crc32c"));
  write(dir + "/metadata.json", j.dump(1));
  EXPECT_EQ(read_metadata(dir).step, 3);
  EXPECT_EQ(faults_text(verify(dir)), "");
  std::vector<Chunk> dst = {empty_chunk("w", {6, 4}, DType::f32, {0, 0}, {6, 4})};
  load(dir, dst);
  test::expect_same_values(dst[0].local, test::reference({6, 4}, DType::f32, 1), "w");
}

TEST(Verify, CliExitsNonZeroOnFaults) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  const std::string dir = save_sample(run);
  hp::test::CliResult r = hp::test::run_hp("ckpt verify " + run);  // a run dir → its latest
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("OK " + dir + ": step 3, 3 tensors, 4 pieces", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;

  const std::string file = dir + "/rank-00000.safetensors";
  fs::resize_file(file, fs::file_size(file) - 2);
  r = hp::test::run_hp("ckpt verify " + dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("FAULT " + dir + "/rank-00000.safetensors (tensor '"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;

  fs::remove(file);
  r = hp::test::run_hp("ckpt verify " + dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("rank-00000.safetensors: missing"), std::string::npos) << r.output;

  // A damaged metadata.json: verify reports it, and inspect no longer exits 0 either.
  std::string text = read(dir + "/metadata.json");
  text[text.find("\"world_size\": 1") + 14] = '2';
  write(dir + "/metadata.json", text);
  r = hp::test::run_hp("ckpt verify " + dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("metadata.json: checksum mismatch"), std::string::npos) << r.output;
  r = hp::test::run_hp("ckpt inspect " + dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("metadata.json: checksum mismatch"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hp::checkpoint
