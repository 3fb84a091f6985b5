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

// A sharded model checkpoint: embed [7, 5] f32 in three row pieces, norm [5] bf16, head [3, 5] in
// two column pieces, and optimizer state that must not be exported.
struct Saved {
  Tensor embed = reference({7, 5}, DType::f32, 1);
  Tensor norm = reference({5}, DType::bf16, 2);
  Tensor head = reference({3, 5}, DType::f32, 3);
  std::string dir;

  explicit Saved(const std::string& run) {
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
                       {"tokenizer.json", "{}\n"}};
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
    EXPECT_TRUE(fs::exists(fs::path(out) / "config.json"));
    EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer.json"));
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
