// Hugging Face export (library and `hp ckpt export-hf`) and `hp ckpt inspect`.
#include "hp/checkpoint/export.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "checkpoint/ckpt_test_util.h"
#include "hp/io/safetensors.h"
#include "io/io_test_util.h"

namespace hp::checkpoint {
namespace {

namespace fs = std::filesystem;
using io::test::TempDir;
using test::chunk_of;
using test::reference;

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Staging (".partial-<pid>") or replaced (".old-<pid>") export dirs left in `parent`.
std::vector<std::string> leftovers(const fs::path& parent) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(parent)) {
    const std::string name = e.path().filename().string();
    if (name.find(".partial-") != std::string::npos || name.find(".old-") != std::string::npos)
      out.push_back(name);
  }
  return out;
}

// A sharded model checkpoint: embed [7, 5] f32 in three row pieces, norm [5] bf16, head [3, 5] in
// two column pieces, and optimizer state that must not be exported.
// `seed` changes every value.
struct Saved {
  Tensor embed, norm, head;
  std::string dir;

  explicit Saved(const std::string& run, int seed = 0)
      : embed(reference({7, 5}, DType::f32, 1 + seed)),
        norm(reference({5}, DType::bf16, 2 + seed)),
        head(reference({3, 5}, DType::f32, 3 + seed)) {
    std::vector<Chunk> chunks = {
        chunk_of("model.embed_tokens.weight", embed, {0, 0}, {3, 5}),
        chunk_of("model.embed_tokens.weight", embed, {3, 0}, {3, 5}),
        chunk_of("model.embed_tokens.weight", embed, {6, 0}, {1, 5}),
        chunk_of("model.norm.weight", norm, {0}, {5}),
        chunk_of("lm_head.weight", head, {0, 0}, {3, 2}),
        chunk_of("lm_head.weight", head, {0, 2}, {3, 3}),
        chunk_of("state.lm_head.weight.exp_avg", head, {0, 0}, {3, 5}),
        {"state.lm_head.weight.step", from_vector({3}, {}, DType::i64), {}, {}},
    };
    SaveOptions opt;
    opt.extra_files = {{"config.json", "{\"model_type\": \"llama\"}\n"},
                       {"tokenizer.json", "{}\n"},
                       {"tokenizer_config.json", "{\"seed\": " + std::to_string(seed) + "}\n"},
                       {"generation_config.json", "{}\n"},
                       {"config.yaml", "training: {steps: 3}\n"}};
    dir = save(run, 3, chunks, R"({"step": 3, "tokens_seen": 1234})", nullptr, opt);
  }

  void expect_exported(const std::string& out) const {
    const auto ck = io::SafetensorsCheckpoint::open(out);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                    "model.norm.weight"}));
    const std::pair<const char*, Tensor> want[] = {{"lm_head.weight", head},
                                                   {"model.embed_tokens.weight", embed},
                                                   {"model.norm.weight", norm}};
    for (const auto& [name, t] : want) {
      const auto& got = ck.tensor(name);
      EXPECT_EQ(got.dtype, t.dtype()) << name;
      EXPECT_EQ(got.shape, t.shape()) << name;
      ASSERT_EQ(got.nbytes, t.nbytes()) << name;
      EXPECT_EQ(std::memcmp(got.data, t.contiguous().raw_data(), got.nbytes), 0) << name;
    }
    // The files saved with the checkpoint (config.json and the tokenizer's) come along; the
    // checkpoint's own files and the training config do not.
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      const bool copied =
          name != "metadata.json" && name != "config.yaml" && name.rfind("rank-", 0) != 0;
      ASSERT_EQ(fs::exists(fs::path(out) / name), copied) << name;
      if (copied) {
        EXPECT_EQ(read(fs::path(out) / name), read(e.path())) << name;
      }
    }
    EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer_config.json"));
  }
};

TEST(Export, SingleFileAndShardedLayouts) {
  TempDir tmp;
  Saved saved(tmp.file("run"));
  const auto one = export_hf(saved.dir, tmp.file("one"));
  EXPECT_EQ(one.tensors, 3);
  EXPECT_EQ(one.shards, 1);
  EXPECT_EQ(one.bytes, 7 * 5 * 4 + 5 * 2 + 3 * 5 * 4);
  EXPECT_TRUE(fs::exists(tmp.file("one/model.safetensors")));
  EXPECT_FALSE(fs::exists(tmp.file("one/model.safetensors.index.json")));
  saved.expect_exported(tmp.file("one"));

  // 100-byte shards: lm_head (60) | embed (140, alone) | norm (10).
  const auto many = export_hf(saved.dir, tmp.file("many"), 100);
  EXPECT_EQ(many.shards, 3);
  EXPECT_TRUE(fs::exists(tmp.file("many/model-00002-of-00003.safetensors")));
  EXPECT_TRUE(fs::exists(tmp.file("many/model.safetensors.index.json")));
  saved.expect_exported(tmp.file("many"));
}

// A re-export into the same directory used to keep the first export's index and shards, which the
// loader prefers: it served the old weights. Now it is refused, and `overwrite` replaces it whole.
TEST(Export, RefusesANonEmptyDirectoryAndOverwriteReplacesItWhole) {
  TempDir tmp;
  Saved a(tmp.file("run_a")), b(tmp.file("run_b"), 4);
  const std::string out = tmp.file("hf");
  EXPECT_EQ(export_hf(a.dir, out, 1).shards, 3);
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_THROW_MSG(export_hf(b.dir, out), IoError, out.c_str(), "not empty", "--overwrite");
  a.expect_exported(out);  // untouched

  EXPECT_EQ(export_hf(b.dir, out, 2'000'000'000, /*overwrite=*/true).shards, 1);
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out + "/model-00001-of-00003.safetensors"));
  b.expect_exported(out);
  EXPECT_EQ(read(fs::path(out) / "tokenizer_config.json"), "{\"seed\": 4}\n");
  EXPECT_EQ(leftovers(tmp.file("")), std::vector<std::string>{});

  // An empty directory (named with a trailing slash) is no obstacle; a file is.
  fs::create_directories(tmp.file("empty"));
  export_hf(a.dir, tmp.file("empty") + "/");
  a.expect_exported(tmp.file("empty"));
  { std::ofstream(tmp.file("file")) << "x"; }
  EXPECT_THROW_MSG(export_hf(a.dir, tmp.file("file"), 100, true), IoError, "not a directory");
  // Never over the checkpoint it exports.
  EXPECT_THROW_MSG(export_hf(a.dir, tmp.file("run_a"), 100, true), IoError, "holds the checkpoint");
  EXPECT_TRUE(fs::exists(a.dir + "/metadata.json"));
  EXPECT_EQ(leftovers(tmp.file("")), std::vector<std::string>{});
}

// An export that fails midway (a corrupted last shard's tensor) leaves no staging directory and no
// output, and leaves an existing export it was to replace as it was.
TEST(Export, AFailedExportLeavesNothingBehind) {
  TempDir tmp;
  Saved good(tmp.file("good")), bad(tmp.file("bad"), 4);
  for (const TensorMeta& t : read_metadata(bad.dir).tensors) {
    if (t.fqn != "model.norm.weight") continue;
    std::fstream f(bad.dir + "/" + t.pieces[0].file,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(t.pieces[0].begin));
    f.write("\x7f\x7f", 2);
  }
  const std::string out = tmp.file("hf");
  // 100-byte shards: lm_head | embed | norm, so two shards are written before the failure.
  EXPECT_THROW_MSG(export_hf(bad.dir, out, 100), IoError, "model.norm.weight");
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(leftovers(tmp.file("")), std::vector<std::string>{});

  export_hf(good.dir, out);
  EXPECT_THROW_MSG(export_hf(bad.dir, out, 100, /*overwrite=*/true), IoError, "model.norm.weight");
  good.expect_exported(out);
  EXPECT_EQ(leftovers(tmp.file("")), std::vector<std::string>{});
}

std::string hp_binary() {
  return (fs::read_symlink("/proc/self/exe").parent_path() / "hp").string();
}

// Runs a command, returning its exit code and (stdout + stderr) text.
std::pair<int, std::string> run(const std::string& cmd) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (f && std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = f ? pclose(f) : -1;
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

TEST(Cli, InspectAndExport) {
  const std::string hp = hp_binary();
  ASSERT_TRUE(fs::exists(hp)) << "hp binary not built (target hp_cli)";
  TempDir tmp;
  Saved saved(tmp.file("run"));

  auto [rc, text] = run(hp + " ckpt inspect " + tmp.file("run"));  // a run dir → its latest
  ASSERT_EQ(rc, 0) << text;
  for (const char* needle :
       {"step 3", "saved by 1 rank", "model.embed_tokens.weight  f32 [7, 5]", "offsets [3, 0]",
        "sizes [1, 5]", "rank-00000.safetensors", "state.lm_head.weight.step  i64 []",
        "\"tokens_seen\": 1234", "5 tensors, 8 pieces"})
    EXPECT_NE(text.find(needle), std::string::npos) << "missing '" << needle << "' in\n" << text;

  std::tie(rc, text) =
      run(hp + " ckpt export-hf " + saved.dir + " " + tmp.file("hf") + " --max-shard-bytes 100");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("exported 3 tensors"), std::string::npos) << text;
  saved.expect_exported(tmp.file("hf"));

  // A second export into it: refused, naming it, unless --overwrite.
  std::tie(rc, text) = run(hp + " ckpt export-hf " + saved.dir + " " + tmp.file("hf"));
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find(tmp.file("hf") + ": directory is not empty"), std::string::npos) << text;
  EXPECT_NE(text.find("--overwrite"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  std::tie(rc, text) =
      run(hp + " ckpt export-hf " + saved.dir + " " + tmp.file("hf") + " --overwrite");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_FALSE(fs::exists(tmp.file("hf/model.safetensors.index.json")));
  saved.expect_exported(tmp.file("hf"));

  // Bad input: exit code 2 and one "[ckpt]" line.
  std::tie(rc, text) = run(hp + " ckpt export-hf " + tmp.file("missing") + " " + tmp.file("x"));
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("[ckpt] "), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  { std::ofstream(saved.dir + "/metadata.json") << "{\"format\": 1}"; }
  std::tie(rc, text) = run(hp + " ckpt inspect " + saved.dir);
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("[ckpt] "), std::string::npos) << text;
  EXPECT_NE(text.find("metadata.json"), std::string::npos) << text;
}

}  // namespace
}  // namespace hp::checkpoint
