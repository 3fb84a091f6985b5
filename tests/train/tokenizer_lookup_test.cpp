// A model directory's tokenizer is found whichever form it has: tokenizer.json, or a tiktoken
// directory as Kimi-K2 publishes it (tiktoken.model + tokenizer_config.json).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "hp/io/tokenizer.h"
#include "hp/train/config.h"
#include "hp/train/setup.h"
#include "test_dir.h"

namespace hp::train {
namespace {

namespace fs = std::filesystem;

Config with_model_dir(const fs::path& dir) {
  return parse_config("model:\n  path: " + dir.string() + "\ndata:\n  path: corpus.txt\n",
                      "run.yaml");
}

TEST(TokenizerLookup, ModelDirectoryWithTiktokenModelIsItsTokenizer) {
  const fs::path dir =
      fs::temp_directory_path() / ("hp_tok_lookup_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_FALSE(io::Tokenizer::in_dir(dir.string()));
  EXPECT_EQ(dataset_options(with_model_dir(dir)).tokenizer, "");  // byte-level then
  const fs::path kimi = fs::path(HP_TEST_DIR).parent_path() / "io/fixtures/tokenizers/kimi";
  for (const char* f : {"tiktoken.model", "tokenizer_config.json"})
    fs::copy_file(kimi / f, dir / f);
  ASSERT_TRUE(io::Tokenizer::in_dir(dir.string()));
  const std::string tok = dataset_options(with_model_dir(dir)).tokenizer;
  EXPECT_EQ(tok, dir.string());
  const io::Tokenizer t = io::Tokenizer::from_file(tok);
  const io::Tokenizer ref = io::Tokenizer::from_file(kimi.string());
  EXPECT_EQ(t.encode("And God said"), ref.encode("And God said"));
  EXPECT_FALSE(t.encode("And God said").empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hp::train
