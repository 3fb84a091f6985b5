// DCP in one process: round trips across dtypes and box splits, dtype conversion on load, the
// commit protocol (latest, keep-K, incomplete dirs, a crash at every point of a save), corrupted
// files and bad metadata.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/ckpt_test_util.h"
#include "hp/io/json.h"
#include "hp/io/safetensors.h"
#include "io/io_test_util.h"

namespace hp::checkpoint {
namespace {

namespace fs = std::filesystem;
using io::test::TempDir;
using test::chunk_of;
using test::empty_chunk;
using test::expect_same_values;
using test::reference;

// A [7, 5] f32 weight saved as three row blocks (3 + 3 + 1, one of them non-contiguous), a bf16
// [4, 3] tensor whole, and a 0-d i64 step counter.
struct Model {
  Tensor w = reference({7, 5}, DType::f32, 1);
  Tensor b = reference({4, 3}, DType::bf16, 2);
  Tensor step = from_vector({41}, {}, DType::i64);

  std::vector<Chunk> chunks() const {
    // Rows 3..5 as a transposed-back view: same values, non-contiguous strides.
    Tensor wt = transpose(w, 0, 1).contiguous();
    Tensor mid = transpose(test::box(wt, {0, 3}, {5, 3}), 0, 1);
    return {chunk_of("w", w, {0, 0}, {3, 5}),
            {"w", mid, {7, 5}, {3, 0}},
            chunk_of("w", w, {6, 0}, {1, 5}),
            chunk_of("b", b, {0, 0}, {4, 3}),
            {"state.w.step", step, {}, {}}};
  }
};

std::string read(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(Dcp, RoundTripMixedDtypes) {
  TempDir tmp;
  Model m;
  const std::string dir = save(tmp.file("run"), 7, m.chunks(), R"({"step": 7})", nullptr);
  EXPECT_EQ(dir, tmp.file("run") + "/step-00000007");

  std::vector<Chunk> dst = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {7, 5}),
                            empty_chunk("b", {4, 3}, DType::bf16, {0, 0}, {4, 3}),
                            empty_chunk("state.w.step", {}, DType::i64, {}, {})};
  load(dir, dst);
  expect_same_values(dst[0].local, m.w, "w");
  expect_same_values(dst[1].local, m.b, "b");
  EXPECT_EQ(dst[2].local.item(), 41);

  const Metadata meta = read_metadata(dir);
  EXPECT_EQ(meta.step, 7);
  EXPECT_EQ(meta.world_size, 1);
  ASSERT_EQ(meta.tensors.size(), 3u);
  EXPECT_EQ(meta.tensors[0].fqn, "b");
  EXPECT_EQ(meta.tensors[0].dtype, DType::bf16);
  EXPECT_EQ(meta.tensors[1].fqn, "state.w.step");
  EXPECT_EQ(meta.tensors[1].global_shape, Shape{});
  EXPECT_EQ(meta.tensors[2].fqn, "w");
  ASSERT_EQ(meta.tensors[2].pieces.size(), 3u);
  EXPECT_EQ(meta.tensors[2].pieces[1].offsets, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(meta.tensors[2].pieces[1].sizes, (std::vector<int64_t>{3, 5}));

  // The rank file is plain safetensors whose byte ranges are the ones in the metadata.
  const auto f = io::SafetensorsFile::open(dir + "/rank-00000.safetensors");
  const auto& t = f.tensor("w@3,0");
  EXPECT_EQ(t.file_offset, meta.tensors[2].pieces[1].begin);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(f.contains("state.w.step@"));
}

TEST(Dcp, LoadsIntoAnyOtherBoxSplit) {
  TempDir tmp;
  Model m;
  const std::string dir = save(tmp.file("run"), 1, m.chunks(), "{}", nullptr);
  // Two column blocks, and an interior box crossing all three saved row blocks.
  std::vector<Chunk> dst = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {7, 2}),
                            empty_chunk("w", {7, 5}, DType::f32, {0, 2}, {7, 3}),
                            empty_chunk("w", {7, 5}, DType::f32, {2, 1}, {5, 3})};
  load(dir, dst);
  expect_same_values(dst[0].local, test::box(m.w, {0, 0}, {7, 2}), "cols 0-1");
  expect_same_values(dst[1].local, test::box(m.w, {0, 2}, {7, 3}), "cols 2-4");
  expect_same_values(dst[2].local, test::box(m.w, {2, 1}, {5, 3}), "interior");

  // A non-contiguous destination is filled in place.
  Tensor target = zeros({5, 7});
  Tensor view = transpose(target, 0, 1);  // [7, 5] view of a [5, 7] buffer
  load(dir, {{"w", view, {7, 5}, {0, 0}}});
  expect_same_values(view, m.w, "strided destination");
}

TEST(Dcp, ConvertsDtypeOnLoad) {
  TempDir tmp;
  Model m;
  const std::string dir = save(tmp.file("run"), 1, m.chunks(), "{}", nullptr);
  for (DType dt : {DType::bf16, DType::f64, DType::f16, DType::i32}) {
    std::vector<Chunk> dst = {empty_chunk("w", {7, 5}, dt, {1, 0}, {5, 5}),
                              empty_chunk("b", {4, 3}, DType::f32, {0, 0}, {4, 3}),
                              empty_chunk("state.w.step", {}, DType::f32, {}, {})};
    load(dir, dst);
    expect_same_values(dst[0].local, test::box(m.w, {1, 0}, {5, 5}), std::string(dtype_name(dt)));
    EXPECT_EQ(dst[0].local.dtype(), dt);
    expect_same_values(dst[1].local, m.b, "bf16 → f32");
    EXPECT_EQ(dst[2].local.item(), 41);
  }
}

TEST(Dcp, TrainerStateAndExtraFilesRoundTrip) {
  TempDir tmp;
  const std::string state =
      R"({"step": 12, "data": {"epoch": 1, "position": [3, 9]}, "rng": "abc", "lr": 0.5})";
  SaveOptions opt;
  opt.extra_files = {{"config.json", "{\"a\": 1}\n"}, {"config.yaml", "lr: 1\n"}};
  const std::string dir = save(tmp.file("run"), 12, Model().chunks(), state, nullptr, opt);
  // The same document (read back with its keys sorted).
  EXPECT_EQ(read_metadata(dir).trainer_state_json, io::parse_json(state, "state").dump());
  EXPECT_EQ(read(fs::path(dir) / "config.json"), "{\"a\": 1}\n");
  EXPECT_EQ(read(fs::path(dir) / "config.yaml"), "lr: 1\n");

  EXPECT_THROW_MSG(save(tmp.file("run"), 13, {}, "[1, 2]", nullptr), ValueError, "JSON object");
  EXPECT_THROW_MSG(save(tmp.file("run"), 13, {}, "{bad", nullptr), ValueError, "JSON object");
  opt.extra_files = {{"metadata.json", "{}"}};
  EXPECT_THROW_MSG(save(tmp.file("run"), 13, {}, "{}", nullptr, opt), ValueError,
                   "'metadata.json'");
  EXPECT_EQ(find_latest(tmp.file("run")), dir);
}

TEST(Dcp, LatestPointerAndFallback) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  EXPECT_EQ(find_latest(run), std::nullopt);  // no run dir yet
  Model m;
  for (int s : {5, 10, 20}) save(run, s, m.chunks(), "{}", nullptr);
  EXPECT_EQ(read(fs::path(run) / "latest"), "step-00000020\n");
  EXPECT_EQ(find_latest(run), run + "/step-00000020");

  // `latest` wins over a higher step (a run resumed from an older checkpoint).
  { std::ofstream(fs::path(run) / "latest") << "step-00000010\n"; }
  EXPECT_EQ(find_latest(run), run + "/step-00000010");
  // A pointer to a missing or incomplete dir falls back to the highest complete one.
  { std::ofstream(fs::path(run) / "latest") << "step-00000099\n"; }
  EXPECT_EQ(find_latest(run), run + "/step-00000020");
  fs::remove(fs::path(run) / "latest");
  EXPECT_EQ(find_latest(run), run + "/step-00000020");
  EXPECT_EQ(resolve_step_dir(run), run + "/step-00000020");
  EXPECT_EQ(resolve_step_dir(run + "/step-00000005"), run + "/step-00000005");
  EXPECT_THROW_MSG(resolve_step_dir(tmp.file("nothing")), IoError, "nothing", "not a checkpoint");
}

TEST(Dcp, StepDirWithoutMetadataIsNotACheckpoint) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Model m;
  save(run, 5, m.chunks(), "{}", nullptr);
  // Leftovers of crashed saves: a final-named dir without metadata, a staging dir, junk names.
  fs::create_directories(fs::path(run) / "step-00000009");
  fs::copy_file(fs::path(run) / "step-00000005" / "rank-00000.safetensors",
                fs::path(run) / "step-00000009" / "rank-00000.safetensors");
  fs::create_directories(fs::path(run) / "step-00000008.partial");
  fs::copy_file(fs::path(run) / "step-00000005" / "metadata.json",
                fs::path(run) / "step-00000008.partial" / "metadata.json");
  fs::create_directories(fs::path(run) / "step-x");
  { std::ofstream(fs::path(run) / "latest") << "step-00000009\n"; }
  EXPECT_EQ(find_latest(run), run + "/step-00000005");
  EXPECT_THROW_MSG(resolve_step_dir(run + "/step-00000009"), IoError, "not a checkpoint");
}

TEST(Dcp, KeepsNewestK) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Model m;
  SaveOptions opt;
  opt.keep = 2;
  for (int s = 1; s <= 5; ++s) save(run, s, m.chunks(), "{}", nullptr, opt);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}));

  // A save of an older step (after resuming from it) is never the one pruned.
  save(run, 3, m.chunks(), "{}", nullptr, opt);
  EXPECT_TRUE(fs::exists(fs::path(run) / "step-00000003" / "metadata.json"));
  EXPECT_TRUE(fs::exists(fs::path(run) / "step-00000005"));
  EXPECT_FALSE(fs::exists(fs::path(run) / "step-00000004"));
  EXPECT_EQ(find_latest(run), run + "/step-00000003");

  // keep = 0 keeps everything.
  for (int s = 6; s <= 8; ++s) save(run, s, m.chunks(), "{}", nullptr);
  EXPECT_TRUE(fs::exists(fs::path(run) / "step-00000003"));
  EXPECT_TRUE(fs::exists(fs::path(run) / "step-00000006"));
}

// Clears the save hook however a test ends.
struct HookGuard {
  ~HookGuard() { detail::set_save_hook(nullptr); }
};

TEST(Dcp, CrashAtAnyPointKeepsThePreviousCheckpoint) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  HookGuard guard;
  Model old_m, new_m;
  new_m.w = reference({7, 5}, DType::f32, 9);
  const std::string first = save(run, 1, old_m.chunks(), R"({"v": 1})", nullptr);
  auto loads_old = [&](const std::string& where) {
    const auto latest = find_latest(run);
    ASSERT_TRUE(latest.has_value()) << where;
    std::vector<Chunk> dst = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {7, 5})};
    load(*latest, dst);
    expect_same_values(dst[0].local, old_m.w, where);
    EXPECT_EQ(read_metadata(*latest).trainer_state_json, R"({"v":1})") << where;
  };
  // Step 2 is new; step 1 is a re-save over the existing checkpoint (the exchange path), which
  // once published has replaced the old one by design, so its last point is not a crash "before".
  for (int step : {2, 1}) {
    for (const char* point : {"staged", "data_written", "metadata_written", "published"}) {
      if (step == 1 && std::string(point) == "published") continue;
      const std::string where = std::string(point) + " of step " + std::to_string(step);
      detail::set_save_hook([&](const std::string& p, int) {
        if (p == point) throw IoError("[test] crash at " + p);
      });
      EXPECT_THROW_MSG(save(run, step, new_m.chunks(), R"({"v": 2})", nullptr), IoError,
                       "crash at");
      detail::set_save_hook(nullptr);
      loads_old(where);
      if (step == 2 && std::string(point) != "published") {
        EXPECT_FALSE(fs::exists(fs::path(run) / "step-00000002" / "metadata.json")) << where;
      }
      // A failed save removes its staging dir (the disk is not left full of it).
      for (const auto& e : fs::directory_iterator(run))
        EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos)
            << where << ": " << e.path();
    }
  }
  // The next save succeeds over the leftovers.
  const std::string second = save(run, 2, new_m.chunks(), R"({"v": 2})", nullptr);
  EXPECT_EQ(find_latest(run), second);
  std::vector<Chunk> dst = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {7, 5})};
  load(second, dst);
  expect_same_values(dst[0].local, new_m.w, "after recovery");
  load(first, dst);
  expect_same_values(dst[0].local, old_m.w, "step 1 untouched");
}

// A save killed outright (no cleanup ran) leaves its staging dir; the next save removes it, with
// keep = 0 (keep every checkpoint) as with keep > 0.
TEST(Dcp, NextSaveRemovesAKilledSavesStagingDir) {
  for (int64_t keep : {0, 2}) {
    TempDir tmp;
    const std::string run = tmp.file("run");
    Model m;
    SaveOptions opt;
    opt.keep = keep;
    save(run, 1, m.chunks(), "{}", nullptr, opt);
    const fs::path staging = fs::path(run) / "step-00000002.partial";
    fs::create_directories(staging);
    fs::copy_file(fs::path(run) / "step-00000001" / "rank-00000.safetensors",
                  staging / "rank-00000.safetensors");
    save(run, 3, m.chunks(), "{}", nullptr, opt);
    EXPECT_FALSE(fs::exists(staging)) << "keep " << keep;
    EXPECT_TRUE(fs::exists(fs::path(run) / "step-00000001" / "metadata.json")) << "keep " << keep;
  }
}

TEST(Dcp, ResaveOfTheSameStepReplacesIt) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Model m1, m2;
  m2.w = reference({7, 5}, DType::f32, 4);
  save(run, 3, m1.chunks(), "{}", nullptr);
  const std::string dir = save(run, 3, m2.chunks(), "{}", nullptr);
  std::vector<Chunk> dst = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {7, 5})};
  load(dir, dst);
  expect_same_values(dst[0].local, m2.w, "re-saved");
  for (const auto& e : fs::directory_iterator(run))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
}

TEST(Dcp, PieceLargerThanOneReadSlabLoadsIntoAnyBox) {
  TempDir tmp;
  // [3000, 1000] f32 = 12 MB: the converting/reshaping path reads it in two ~8 MiB slabs.
  const Tensor w = reference({3000, 1000}, DType::f32, 5);
  const std::string dir =
      save(tmp.file("run"), 1, {chunk_of("w", w, {0, 0}, {3000, 1000})}, "{}", nullptr);
  std::vector<Chunk> dst = {empty_chunk("w", {3000, 1000}, DType::f32, {0, 0}, {3000, 300}),
                            empty_chunk("w", {3000, 1000}, DType::bf16, {1000, 300}, {2000, 700})};
  load(dir, dst);
  expect_same_values(dst[0].local, test::box(w, {0, 0}, {3000, 300}), "columns 0-299");
  expect_same_values(dst[1].local, test::box(w, {1000, 300}, {2000, 700}), "bf16 corner");
}

// Overwrites `n` bytes at `offset` of a file.
void patch(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Dcp, CorruptedOrTruncatedDataFileIsReported) {
  TempDir tmp;
  Model m;
  const std::string dir = save(tmp.file("run"), 1, m.chunks(), "{}", nullptr);
  const std::string file = dir + "/rank-00000.safetensors";
  const Metadata meta = read_metadata(dir);
  const TensorMeta::Piece& piece = meta.tensors[2].pieces[1];  // w rows 3..5
  std::vector<Chunk> all_w = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {7, 5})};

  patch(file, piece.begin + 5, "\x7f");
  EXPECT_THROW_MSG(load(dir, all_w), IoError, "rank-00000.safetensors", "'w'", "checksum",
                   "offsets [3, 0]");
  // Pieces the flipped byte is not in still load.
  std::vector<Chunk> first_rows = {empty_chunk("w", {7, 5}, DType::f32, {0, 0}, {3, 5})};
  load(dir, first_rows);
  expect_same_values(first_rows[0].local, test::box(m.w, {0, 0}, {3, 5}), "intact piece");

  // The same through the converting path (read in slabs, not straight into the destination).
  EXPECT_THROW_MSG(load(dir, {empty_chunk("w", {7, 5}, DType::f64, {0, 0}, {7, 5})}), IoError,
                   "rank-00000.safetensors", "'w'", "checksum", "offsets [3, 0]");

  fs::resize_file(file, piece.end - 4);
  EXPECT_THROW_MSG(load(dir, all_w), IoError, "rank-00000.safetensors", "'w'", "truncated");
  fs::remove(file);
  EXPECT_THROW_MSG(load(dir, all_w), IoError, "rank-00000.safetensors", "'w'", "cannot open");
}

TEST(Dcp, LoadErrorsNameTheTensor) {
  TempDir tmp;
  const std::string dir = save(tmp.file("run"), 1, Model().chunks(), "{}", nullptr);
  EXPECT_THROW_MSG(load(dir, {empty_chunk("nope", {2}, DType::f32, {0}, {2})}), IoError,
                   "metadata.json", "no tensor 'nope'");
  EXPECT_THROW_MSG(load(dir, {empty_chunk("w", {7, 6}, DType::f32, {0, 0}, {7, 6})}), IoError,
                   "'w'", "[7, 5]", "[7, 6]");
  EXPECT_THROW_MSG(load(dir, {empty_chunk("w", {7, 5}, DType::f32, {6, 0}, {2, 5})}), ValueError,
                   "'w'", "exceeds global shape");
  EXPECT_THROW_MSG(load(tmp.file("run/step-00000002"), {}), IoError, "metadata.json");
}

TEST(Dcp, SaveRejectsBadSharding) {
  TempDir tmp;
  const Tensor w = reference({4, 2}, DType::f32, 0);
  const std::string run = tmp.file("run");
  EXPECT_THROW_MSG(save(run, 1, {chunk_of("w", w, {0, 0}, {2, 2})}, "{}", nullptr), ValueError,
                   "'w'", "cover 4 of 8");
  EXPECT_THROW_MSG(
      save(run, 1, {chunk_of("w", w, {0, 0}, {3, 2}), chunk_of("w", w, {2, 0}, {2, 2})}, "{}",
           nullptr),
      ValueError, "'w'", "overlaps");
  EXPECT_THROW_MSG(
      save(run, 1, {chunk_of("w", w, {0, 0}, {4, 2}), chunk_of("w", w, {0, 0}, {4, 2})}, "{}",
           nullptr),
      ValueError, "'w'", "given twice");
  EXPECT_THROW_MSG(save(run, 1, {{"w", w, {3, 2}, {0, 0}}}, "{}", nullptr), ValueError, "'w'",
                   "exceeds global shape [3, 2]");
  EXPECT_THROW_MSG(save(run, 1, {{"w", w, {8, 2}, {0, 0}, true}}, "{}", nullptr), ValueError, "'w'",
                   "replicated");
  EXPECT_EQ(find_latest(run), std::nullopt);  // nothing was committed
}

// Rewrites metadata.json through `edit`, without its checksum (as a checkpoint written before
// metadata_crc32c existed), so the strict checks behind the checksum are what is tested.
void edit_metadata(const std::string& dir, const std::function<void(io::JsonValue&)>& edit) {
  io::JsonValue j = io::parse_json_value(read(fs::path(dir) / "metadata.json"), "metadata.json");
  j.erase("metadata_crc32c");
  edit(j);
  std::ofstream(fs::path(dir) / "metadata.json") << j.dump();
}

TEST(Dcp, MetadataIsReadStrictly) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  struct Case {
    std::function<void(io::JsonValue&)> edit;
    std::vector<const char*> needles;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j["version"] = 99; }, {"version", "unsupported version 99"}},
      {[](auto& j) { j["extra"] = 1; }, {"unknown key 'extra'"}},
      {[](auto& j) { j["tensors"]["w"]["dtype"] = "f33"; }, {"tensors.w.dtype", "f33"}},
      {[](auto& j) { j["tensors"]["w"]["pieces"][0]["crc32c"] = "x"; },
       {"tensors.w.pieces[0].crc32c"}},
      {[](auto& j) { j["tensors"]["w"]["pieces"].erase(0); }, {"'w'", "cover"}},
      {[](auto& j) { j["tensors"]["w"]["pieces"][0]["file"] = "../x"; }, {"'../x'"}},
      {[](auto& j) { j["tensors"]["w"]["pieces"][0]["byte_range"][1] = 1; }, {"'w'", "byte range"}},
      {[](auto& j) { j["trainer_state"] = 3; }, {"trainer_state", "object"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string dir = save(run, static_cast<int64_t>(i), Model().chunks(), "{}", nullptr);
    edit_metadata(dir, cases[i].edit);
    try {
      read_metadata(dir);
      ADD_FAILURE() << "case " << i << " was accepted";
    } catch (const IoError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[ckpt] ", 0), 0u) << msg;
      EXPECT_NE(msg.find("metadata.json"), std::string::npos) << msg;
      for (const char* n : cases[i].needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace hp::checkpoint
