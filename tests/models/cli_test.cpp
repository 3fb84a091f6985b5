// The `hp forward` / `hp generate` / `hp model info` paths on fixture models (runs the hp binary
// built next to this test; skipped when it is not there).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "hp/io/json.h"
#include "hp/io/safetensors.h"
#include "hp/io/tokenizer.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "test_dir.h"

namespace hp::models {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/" + name;
}

// The hp binary, or "" when it is not built.
std::string hp_binary() {
  const std::string p = test::hp_binary();
  return fs::exists(p) ? p : "";
}

std::pair<int, std::string> run(const std::string& cmd) {
  auto r = test::run_command(cmd);
  return {r.code, r.output};
}

TEST(Cli, ForwardMatchesRecordedLogits) {
  const std::string hp = hp_binary();
  ASSERT_FALSE(hp.empty()) << "hp binary not built (target hp_cli)";
  const std::string dir = fixture("qwen3");
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const auto& ids = ref.tensor("input_ids");  // [2, 12] i64
  const auto* id = reinterpret_cast<const int64_t*>(ids.data);
  const fs::path tmp = fs::path(::testing::TempDir()) / "hp_cli_forward";
  fs::create_directories(tmp);
  {
    std::ofstream tok(tmp / "tokens.txt");
    for (int64_t b = 0; b < ids.shape[0]; ++b) {
      for (int64_t t = 0; t < ids.shape[1]; ++t) tok << id[b * ids.shape[1] + t] << ' ';
      tok << '\n';
    }
  }
  const std::string out = (tmp / "logits.f32").string();
  auto [rc, text] = run(hp + " forward --model " + dir + " --tokens " +
                        (tmp / "tokens.txt").string() + " --out " + out);
  ASSERT_EQ(rc, 0) << text;
  const auto& want = ref.tensor("logits");
  ASSERT_EQ(fs::file_size(out), want.nbytes);
  std::vector<float> got(want.nbytes / 4);
  std::ifstream(out, std::ios::binary).read(reinterpret_cast<char*>(got.data()), want.nbytes);
  const auto* w = reinterpret_cast<const float*>(want.data);
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(double(got[i]) - w[i]));
  EXPECT_LE(m, 1e-4);
}

TEST(Cli, ErrorsAreOneLineExitTwo) {
  const std::string hp = hp_binary();
  ASSERT_FALSE(hp.empty()) << "hp binary not built (target hp_cli)";
  auto [rc, text] = run(hp + " forward --model /nonexistent --tokens x --out y");
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  std::tie(rc, text) = run(hp + " model info " + std::string(HP_TEST_DIR));
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("config.json"), std::string::npos) << text;
  std::tie(rc, text) = run(hp + " generate --model " + fixture("qwen3") + " --prompt hi");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(text.find("tokenizer.json"), std::string::npos) << text;
}

TEST(Cli, GenerateAndInfoOnASavedRandomModel) {
  const std::string hp = hp_binary();
  ASSERT_FALSE(hp.empty()) << "hp binary not built (target hp_cli)";
  const std::string tok_json =
      std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/qwen2.tokenizer.json";
  const fs::path tok_dir = fs::path(::testing::TempDir()) / "hp_cli_tok";
  fs::create_directories(tok_dir);
  fs::copy_file(tok_json, tok_dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  ModelConfig c = read_model_config(fixture("qwen3"));
  c.vocab_size = io::Tokenizer::from_file(tok_json).vocab_size();
  const std::string dir = (fs::path(::testing::TempDir()) / "hp_cli_model").string();
  save_pretrained(*build_model(c), dir, int64_t(1) << 30, tok_dir.string());
  auto [rc, text] = run(hp + " generate --model " + dir + " --prompt 'Hello' --max-new-tokens 5");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_EQ(text.rfind("Hello", 0), 0u) << text;
  auto [rc2, text2] =
      run(hp + " generate --model " + dir +
          " --prompt 'Hello' --max-new-tokens 5 --temperature 0.8 --top-p 0.9 --seed 3");
  EXPECT_EQ(rc2, 0) << text2;
  auto [rc3, text3] = run(hp + " model info " + dir);
  ASSERT_EQ(rc3, 0) << text3;
  EXPECT_NE(text3.find("Qwen3ForCausalLM"), std::string::npos) << text3;
  EXPECT_NE(text3.find("F32"), std::string::npos) << text3;
}

// `hp generate` on a DeepSeek-V4 fixture (with the fixtures' character-level tokenizer beside its
// config and weights): the greedy text is the prompt plus transformers' greedy continuation
// (reference generate.prompt / generate.greedy, tools/make_v4_fixtures.py), decoded by that
// tokenizer.
TEST(Cli, GenerateDeepseekV4MatchesTransformersGreedy) {
  const std::string hp = hp_binary();
  ASSERT_FALSE(hp.empty()) << "hp binary not built (target hp_cli)";
  for (const std::string name : {"deepseek_v4_hc2", "deepseek_v4_hc4"}) {
    const fs::path dir =
        fs::path(::testing::TempDir()) / ("hp_cli_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      fs::create_symlink(fixture(name) + "/" + f, dir / f);
    fs::create_symlink(fixture("deepseek_v4.tokenizer.json"), dir / "tokenizer.json");
    const auto ref = io::SafetensorsFile::open(fixture(name) + "/reference.safetensors");
    const auto ids = [&](const std::string& key) {
      const auto& t = ref.tensor(key);
      const auto* p = reinterpret_cast<const int64_t*>(t.data);
      return std::vector<int32_t>(p, p + t.numel());
    };
    const auto tok = io::Tokenizer::from_file(dir.string());
    const std::string prompt = tok.decode(ids("generate.prompt"), true);
    const std::vector<int32_t> greedy = ids("generate.greedy");
    // Single-quoted for the shell ('\'' closes, escapes and reopens around a quote).
    std::string quoted = "'";
    for (char c : prompt) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    auto [rc, text] = run(hp + " generate --model " + dir.string() + " --prompt " + quoted +
                          " --max-new-tokens " + std::to_string(greedy.size()));
    ASSERT_EQ(rc, 0) << text;
    EXPECT_EQ(text, prompt + tok.decode(greedy, true) + "\n") << name;
    fs::remove_all(dir);
  }
}

// Without weights `hp model info` counts the parameters the config implies (layer by layer): the
// same count as the weights' headers give, and an absurd layer count fails at once, naming the
// file, key and value, where it used to build layers for years.
TEST(Cli, InfoWithoutWeightsCountsFromTheConfig) {
  const std::string hp = hp_binary();
  ASSERT_FALSE(hp.empty()) << "hp binary not built (target hp_cli)";
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("hp_cli_info_config_only_" + std::to_string(::getpid()));
  for (const std::string name : {"qwen3", "qwen3_moe", "deepseek_v3"}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(fixture(name) + "/config.json", dir / "config.json");
    auto [rc, with_weights] = run(hp + " model info " + fixture(name));
    ASSERT_EQ(rc, 0) << with_weights;
    auto [rc2, from_config] = run(hp + " model info " + dir.string());
    ASSERT_EQ(rc2, 0) << from_config;
    EXPECT_NE(from_config.find("[no weights: from config]"), std::string::npos) << from_config;
    const auto count = [](const std::string& text) {
      const size_t at = text.find("parameters");
      return at == std::string::npos ? std::string() : text.substr(at, text.find(" (", at) - at);
    };
    EXPECT_EQ(count(from_config), count(with_weights)) << name;
  }
  io::JsonValue j = io::parse_json_value(
      io::read_text_file(fixture("qwen3") + "/config.json", "test"), "config.json");
  j["num_hidden_layers"] = 1000000000000LL;
  std::ofstream(dir / "config.json") << j.dump(2);
  // `timeout`: before the bound this ran until killed.
  auto [rc, text] = run("timeout 60 " + hp + " model info " + dir.string());
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find((dir / "config.json").string() + ": num_hidden_layers: 1000000000000 layers"),
            std::string::npos)
      << text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hp::models
