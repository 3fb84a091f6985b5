#include "hp/io/tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"
#include "io/io_test_util.h"

namespace hp::io {
namespace {

using test::fixture;

std::vector<int32_t> ids_of(const Json& node) {
  std::vector<int32_t> out;
  for (const Json& v : node.elements()) out.push_back(static_cast<int32_t>(v.as_int()));
  return out;
}

// Every encoding and decoding recorded from the Python `tokenizers` library must match exactly.
// Returns the number of encode cases checked.
int check_against_python(const Tokenizer& tok, const std::string& expected_file) {
  Json expected = read_json_file(expected_file);
  int checked = 0;
  for (const Json& c : expected.at("encode").elements()) {
    std::string text = c.get_string("text");
    SCOPED_TRACE(expected_file + " text: " + c.at("text").dump());
    std::vector<int32_t> ids = ids_of(c.at("ids"));
    EXPECT_EQ(tok.encode(text, true), ids);
    EXPECT_EQ(tok.encode(text, false), ids_of(c.at("ids_no_special")));
    EXPECT_EQ(tok.decode(ids, false), c.get_string("decoded"));
    EXPECT_EQ(tok.decode(ids, true), c.get_string("decoded_skip_special"));
    ++checked;
  }
  for (const Json& c : expected.at("decode").elements()) {
    std::vector<int32_t> ids = ids_of(c.at("ids"));
    SCOPED_TRACE(expected_file + " decode " + c.at("ids").dump());
    EXPECT_EQ(tok.decode(ids, c.get_bool("skip_special_tokens")), c.get_string("text"));
  }
  return checked;
}

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

// Each style's tokenizer.json (kimi: a tiktoken directory, checked against the tiktoken package).
TEST_P(TokenizerFixture, MatchesPythonTokenizers) {
  const std::string name = GetParam();
  Tokenizer tok = Tokenizer::from_file(
      fixture("tokenizers/" + name + (name == "kimi" ? "" : ".tokenizer.json")));
  EXPECT_GT(check_against_python(tok, fixture("tokenizers/" + name + ".expected.json")), 40);
  // Optional random-text comparison: tools/make_tokenizer_fixtures.py --stress DIR.
  if (const char* dir = std::getenv("HP_TOKENIZER_STRESS_DIR")) {
    EXPECT_GT(check_against_python(tok, std::string(dir) + "/" + name + ".expected.json"), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Io, TokenizerFixture,
                         ::testing::Values("gpt2", "llama3", "qwen2", "deepseek_v3", "llama2",
                                           "mistral", "misc", "kimi"));

TEST(Tokenizer, Accessors) {
  Tokenizer tok = Tokenizer::from_file(fixture("tokenizers/llama3.tokenizer.json"));
  auto bos = tok.token_to_id("<|begin_of_text|>");
  ASSERT_TRUE(bos.has_value());
  EXPECT_TRUE(tok.is_special(*bos));
  EXPECT_EQ(tok.id_to_token(*bos), "<|begin_of_text|>");
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>{*bos});
  EXPECT_EQ(tok.vocab_size(), 701);
  EXPECT_FALSE(tok.id_to_token(100000).has_value());
  EXPECT_EQ(tok.decode(std::vector<int32_t>{-1, 100000}), "");
  EXPECT_THROW_MSG(tok.encode("bad \xff utf8"), ValueError, "llama3.tokenizer.json", "byte 4");
}

// Repeated encodes hit the BPE cache and must give the same ids.
TEST(Tokenizer, CacheIsTransparent) {
  Tokenizer tok = Tokenizer::from_file(fixture("tokenizers/qwen2.tokenizer.json"));
  std::string text = "The quick brown fox jumps over the lazy dog. Привет мир 12345";
  auto first = tok.encode(text);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tok.encode(text), first);
  EXPECT_EQ(tok.decode(first), text);
}

// A minimal valid tokenizer.json with one field replaced.
std::string spec_with(const std::string& key, const JsonValue& value) {
  JsonValue j = JsonValue::object(
      {{"model", JsonValue::object({{"type", "BPE"},
                                    {"vocab", JsonValue::object({{"a", 0}, {"b", 1}, {"ab", 2}})},
                                    {"merges", JsonValue::array({"a b"})}})},
       {"pre_tokenizer", nullptr},
       {"decoder", nullptr}});
  if (key.rfind("model.", 0) == 0)
    j["model"][key.substr(6)] = value;
  else
    j[key] = value;
  return j.dump();
}

TEST(Tokenizer, BadInput) {
  EXPECT_EQ(Tokenizer::from_json(spec_with("normalizer", nullptr), "t.json").encode("abab"),
            (std::vector<int32_t>{2, 2}));
  EXPECT_THROW_MSG(Tokenizer::from_file("/nonexistent/tokenizer.json"), IoError,
                   "/nonexistent/tokenizer.json", "cannot open");
  EXPECT_THROW_MSG(Tokenizer::from_json("{\"model\": {", "t.json"), IoError, "t.json", "line 1");
  EXPECT_THROW_MSG(Tokenizer::from_json(spec_with("model.type", "WordPiece"), "t.json"), IoError,
                   "t.json", "model.type", "WordPiece");
  EXPECT_THROW_MSG(Tokenizer::from_json("{}", "t.json"), IoError, "t.json",
                   "missing key \"model\"");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(spec_with("model.merges", JsonValue::array({"a c"})), "t.json"), IoError,
      "model.merges[0]", "\"c\" is not in model.vocab");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(spec_with("model.merges", JsonValue::array({"a b c"})), "t.json"),
      IoError, "model.merges[0]", "two tokens");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(
          spec_with("model.merges", JsonValue::array({JsonValue::array({"b", "a"})})), "t.json"),
      IoError, "model.merges[0]", "\"ba\" is not in model.vocab");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(spec_with("model.vocab", JsonValue::object({{"a", -1}})), "t.json"),
      IoError, "model.vocab.a", "non-negative integer");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(spec_with("normalizer", JsonValue::object({{"type", "Precompiled"}})),
                           "t.json"),
      IoError, "t.json", "normalizer.type", "unsupported normalizer type \"Precompiled\"");
  EXPECT_THROW_MSG(Tokenizer::from_json(
                       spec_with("decoder", JsonValue::object({{"type", "WordPiece"}})), "t.json"),
                   IoError, "t.json", "decoder.type", "WordPiece");
  JsonValue split = JsonValue::object({{"type", "Split"},
                                       {"pattern", JsonValue::object({{"Regex", "(?<=a)b"}})},
                                       {"behavior", "Isolated"},
                                       {"invert", false}});
  EXPECT_THROW_MSG(Tokenizer::from_json(spec_with("pre_tokenizer", split), "t.json"), IoError,
                   "t.json", "pre_tokenizer.pattern.Regex", "look-behind", "(?<=a)b");
  split["pattern"] = JsonValue::object({{"Regex", "a"}});
  split["behavior"] = "Sideways";
  EXPECT_THROW_MSG(Tokenizer::from_json(spec_with("pre_tokenizer", split), "t.json"), IoError,
                   "pre_tokenizer.behavior", "Sideways");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(
          spec_with("pre_tokenizer", JsonValue::object({{"type", "UnicodeScripts"}})), "t.json"),
      IoError, "t.json", "pre_tokenizer.type", "UnicodeScripts");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(
          spec_with(
              "pre_tokenizer",
              JsonValue::object(
                  {{"type", "Sequence"},
                   {"pretokenizers", JsonValue::array({JsonValue::object({{"type", "Bogus"}})})}})),
          "t.json"),
      IoError, "pre_tokenizer.pretokenizers[0].type", "Bogus");
  EXPECT_THROW_MSG(
      Tokenizer::from_json(
          spec_with("added_tokens", JsonValue::array({JsonValue::object({{"id", 5}})})), "t.json"),
      IoError, "added_tokens[0]", "missing key \"content\"");
  EXPECT_THROW_MSG(Tokenizer::from_json(spec_with("model.unk_token", "<unk>"), "t.json"), IoError,
                   "model.unk_token", "not in model.vocab");
}

// Decoder chains on one token list, against the tokenizers package's decode of the same tokens.
TEST(Tokenizer, DecoderChainsMatchReference) {
  const std::vector<std::string> tokens = {
      "\u2581Hey", "\u2581\u2581friend", "!",     "\u2581", "<0xE2>", "<0x82>",
      "<0xAC>",    "xxa\u2581x",         "<0xFF>"};
  JsonValue vocab;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    ids.push_back(static_cast<int32_t>(i));
  }
  auto decode_with = [&](const JsonValue& decoder) {
    JsonValue j = JsonValue::object(
        {{"model",
          JsonValue::object({{"type", "BPE"}, {"vocab", vocab}, {"merges", JsonValue::array()}})},
         {"decoder", decoder}});
    return Tokenizer::from_json(j.dump(), "t.json").decode(ids);
  };
  JsonValue meta = JsonValue::object({{"type", "Metaspace"},
                                      {"replacement", "\u2581"},
                                      {"prepend_scheme", "always"},
                                      {"split", true}});
  EXPECT_EQ(decode_with(meta), "Hey  friend! <0xE2><0x82><0xAC>xxa x<0xFF>");
  meta["prepend_scheme"] = "never";
  EXPECT_EQ(decode_with(meta), " Hey  friend! <0xE2><0x82><0xAC>xxa x<0xFF>");
  JsonValue chain = JsonValue::object(
      {{"type", "Sequence"},
       {"decoders",
        JsonValue::array(
            {JsonValue::object({{"type", "ByteFallback"}}),
             JsonValue::object({{"type", "Strip"}, {"content", "x"}, {"start", 2}, {"stop", 1}}),
             JsonValue::object({{"type", "Replace"},
                                {"pattern", JsonValue::object({{"Regex", "\u2581+"}})},
                                {"content", "_"}})})}});
  EXPECT_EQ(decode_with(chain), "_Hey_friend!_\u20aca_\ufffd");
  chain["decoders"] = JsonValue::array(
      {JsonValue::object({{"type", "ByteFallback"}}), JsonValue::object({{"type", "Fuse"}})});
  EXPECT_EQ(decode_with(chain), "\u2581Hey\u2581\u2581friend!\u2581\u20acxxa\u2581x\ufffd");
}

// Each pre-tokenizer's pieces of one text (Split behaviours and invert, Digits, Metaspace with
// split, Punctuation, WhitespaceSplit, BertPreTokenizer, Whitespace) as pre_tokenize_str gives
// them.
TEST(Tokenizer, PreTokenizersMatchReference) {
  std::ifstream in(fixture("tokenizers/pretokenizers.jsonl"));
  int checked = 0;
  for (std::string line; std::getline(in, line); ++checked) {
    Json c = parse_json(line, "pretokenizers.jsonl");
    SCOPED_TRACE(c.at("spec").dump());
    auto pre = detail::load_pre_tokenizer(c.at("spec"));
    std::vector<detail::Piece> pieces{{c.get_string("text"), true}};
    pre->split(pieces);
    std::vector<std::string> got, want;
    for (const detail::Piece& p : pieces) got.push_back(p.text);
    for (const Json& p : c.at("pieces").elements()) want.push_back(p.as_string());
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(checked, 19);
}

// A tiktoken directory: Kimi's layout, and malformed tiktoken.model lines named by file and line.
TEST(Tokenizer, TiktokenDirectory) {
  Tokenizer kimi = Tokenizer::from_file(fixture("tokenizers/kimi"));
  auto bos = kimi.token_to_id("[BOS]");
  ASSERT_TRUE(bos.has_value());
  EXPECT_TRUE(kimi.is_special(*bos));
  EXPECT_EQ(kimi.vocab_size(), *bos + 256);  // 256 special ids follow the base vocabulary
  EXPECT_EQ(kimi.id_to_token(*bos + 200), "<|reserved_token_" + std::to_string(*bos + 200) + "|>");
  EXPECT_EQ(kimi.encode("[BOS]x", true).front(), *bos);  // nothing added, the text's BOS kept
  EXPECT_EQ(kimi.id_to_token(65), "A");
  EXPECT_EQ(kimi.id_to_token(32), "\xC4\xA0");  // byte-level spelling of the space
  EXPECT_EQ(kimi.id_to_token(10), "\xC4\x8A");  // byte-level spelling of '\n'

  test::TempDir dir;
  std::ifstream good(fixture("tokenizers/kimi/tiktoken.model"));
  std::stringstream ranks;
  ranks << good.rdbuf();
  auto with = [&](const std::string& extra) {
    std::ofstream(dir.file("tiktoken.model")) << ranks.str() << extra;
    return dir.file("");
  };
  const std::string model_str = dir.file("tiktoken.model");
  const char* model = model_str.c_str();
  EXPECT_THROW_MSG(Tokenizer::from_file(with("QUJD\n")), IoError, model, "not two fields",
                   "\"QUJD\"");
  EXPECT_THROW_MSG(Tokenizer::from_file(with("QU*D 9999\n")), IoError, model, "invalid base64",
                   "QU*D 9999");
  EXPECT_THROW_MSG(Tokenizer::from_file(with("QUJD -1\n")), IoError, model, "invalid rank");
  EXPECT_THROW_MSG(Tokenizer::from_file(with("QQ== 9999\n")), IoError, model, "duplicate token");
  std::ofstream(dir.file("tiktoken.model")) << "QUJD 0\n";
  EXPECT_THROW_MSG(Tokenizer::from_file(dir.file("")), IoError, model, "byte 0x0 has no token");
  std::filesystem::remove(dir.file("tiktoken.model"));
  EXPECT_THROW_MSG(Tokenizer::from_file(dir.file("")), IoError,
                   "neither tokenizer.json nor tiktoken.model");
}

}  // namespace
}  // namespace hp::io
