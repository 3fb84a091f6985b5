// `hp tokenize`: for every tokenizer style of tests/io/fixtures/tokenizers (tokenizer.json files
// and the Kimi tiktoken directory), the ids printed for each line of the recorded test set equal
// the reference library's (with and without --add-special), and --decode prints the reference text;
// usage and input errors exit 2 naming the flag, file, line or key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "has.h"
#include "hp/io/json.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_hp;

const std::string kTok = std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/";

using test::has;

std::string ids_json(const io::Json& arr) {
  std::string out = "[";
  for (const io::Json& v : arr.elements()) out += (out.size() > 1 ? ", " : "") + v.dump();
  return out + "]";
}

class TokenizeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
    dir_ = fs::temp_directory_path() / ("hp_tokenize_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

class TokenizeCli : public TokenizeCliTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(TokenizeCli, IdsAndTextMatchReference) {
  const std::string name = GetParam();
  const std::string tok = kTok + name + (name == "kimi" ? "" : ".tokenizer.json");
  io::Json expected = io::read_json_file(kTok + name + ".expected.json");
  // One input per line: the recorded texts without a line break of their own.
  std::string texts, ids, ids_special, id_lines, decoded;
  int n = 0;
  for (const io::Json& c : expected.at("encode").elements()) {
    std::string text = c.get_string("text"), dec = c.get_string("decoded");
    if (text.find_first_of("\r\n") != std::string::npos || dec.find('\n') != std::string::npos)
      continue;
    texts += text + "\n";
    ids += ids_json(c.at("ids_no_special")) + "\n";
    ids_special += ids_json(c.at("ids")) + "\n";
    id_lines += ids_json(c.at("ids")) + "\n";
    decoded += dec + "\n";
    ++n;
  }
  ASSERT_GT(n, 30);
  const std::string in = write("in.txt", texts), in_ids = write("ids.txt", id_lines);
  auto r = run_hp("tokenize --tokenizer " + tok + " --file " + in);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, ids);
  r = run_hp("tokenize --tokenizer " + tok + " --file " + in + " --add-special");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, ids_special);
  r = run_hp("tokenize --tokenizer " + tok + " --decode --file " + in_ids);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, decoded);
}

INSTANTIATE_TEST_SUITE_P(Styles, TokenizeCli,
                         ::testing::Values("gpt2", "llama3", "qwen2", "deepseek_v3", "llama2",
                                           "mistral", "misc", "kimi"));

TEST_F(TokenizeCliTest, TextModeAndErrors) {
  const std::string gpt2 = kTok + "gpt2.tokenizer.json";
  auto r = run_hp("tokenize --tokenizer " + gpt2 + " --text 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string hello_ids = r.output;
  EXPECT_EQ(hello_ids.front(), '[');
  r = run_hp("tokenize --tokenizer " + gpt2 + " --decode --text '" +
             hello_ids.substr(0, hello_ids.size() - 1) + "'");
  EXPECT_EQ(r.output, "Hello world\n");

  r = run_hp("tokenize --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(has(r.output, "usage: hp tokenize")) << r.output;
  r = run_hp("tokenize --tokenizer " + gpt2);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "--text STR or --file F")) << r.output;
  r = run_hp("tokenize --tokenizer " + gpt2 + " --text x --decod");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "did you mean --decode")) << r.output;
  r = run_hp("tokenize --tokenizer " + gpt2 + " --decode --file " +
             write("bad.txt", "[1]\n[1,x]\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "bad.txt:2")) << r.output;
  r = run_hp("tokenize --tokenizer " + gpt2 + " --file " + write("utf.txt", "ok\nbad \xff\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "utf.txt:2") && has(r.output, "not valid UTF-8")) << r.output;

  // A malformed tiktoken.model line names the file, the line and the text.
  fs::create_directories(dir_ / "tt");
  std::ifstream good(kTok + "kimi/tiktoken.model");
  std::stringstream model;
  model << good.rdbuf();
  write("tt/tiktoken.model", model.str() + "QUJD 9x9\n");
  r = run_hp("tokenize --tokenizer " + (dir_ / "tt").string() + " --text hi");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "tt/tiktoken.model:") && has(r.output, "invalid rank") &&
              has(r.output, "QUJD 9x9"))
      << r.output;
  // An unknown pipeline component names the file, key and value.
  write("t.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
            "decoder": {"type": "Sequence", "decoders": [{"type": "CTC"}]}})");
  r = run_hp("tokenize --tokenizer " + (dir_ / "t.json").string() + " --text a");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "t.json") && has(r.output, "decoder.decoders[0].type") &&
              has(r.output, "CTC"))
      << r.output;
}

}  // namespace
}  // namespace hp::cli
