// The byte-level vocabulary as a tokenizer.json (io/byte_level_tokenizer.h), the file a checkpoint
// of a byte-level run carries so that its export has a tokenizer.
#include "hp/io/byte_level_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hp/data/encoder.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer.h"
#include "test_dir.h"

namespace hp::data {
namespace {

std::vector<int32_t> ids_of(const io::Json& node) {
  std::vector<int32_t> out;
  for (const io::Json& v : node.elements()) out.push_back(static_cast<int32_t>(v.as_int()));
  return out;
}

// hp's byte-level vocabulary as a tokenizer.json (io/byte_level_tokenizer.h): loaded by hp's own
// tokenizer.json loader it gives the ids and texts the Python `tokenizers` library gave for the
// same file (tools/make_byte_level_tokenizer_fixture.py), and those are the byte-level encoder's
// ids (data/encoder.h), except the separator's content written in the text.
TEST(ByteLevelTokenizer, JsonMatchesPythonAndTheEncoder) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("hp_byte_level_" + std::to_string(getpid()) + ".json");
  std::ofstream(file) << io::byte_level_tokenizer_json(kAutoSeparatorTokens[0], kByteSeparator);
  const io::Tokenizer tok = io::Tokenizer::from_file(file.string());
  const DocumentEncoder bytes("", "");
  const DocumentEncoder as_data(file.string(), "");
  std::filesystem::remove(file);
  EXPECT_EQ(tok.vocab_size(), kByteVocab);
  EXPECT_EQ(as_data.separator_id(), kByteSeparator);  // <|endoftext|>: the automatic one
  const io::Json expected = io::read_json_file(
      std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/byte_level.expected.json");
  int checked = 0;
  for (const io::Json& c : expected.at("encode").elements()) {
    const std::string text = c.get_string("text");
    SCOPED_TRACE("text: " + c.at("text").dump());
    const std::vector<int32_t> ids = ids_of(c.at("ids"));
    EXPECT_EQ(tok.encode(text, false), ids);
    EXPECT_EQ(tok.decode(ids, false), c.get_string("decoded"));
    std::vector<int32_t> from_bytes;
    bytes.encode(text, from_bytes);
    // The separator's content in the text: bytes for the byte-level encoder, id 256 for the file.
    if (text.find(kAutoSeparatorTokens[0]) == std::string::npos) {
      EXPECT_EQ(from_bytes, ids);
    }
    std::vector<int32_t> from_file;
    as_data.encode(text, from_file);
    EXPECT_EQ(from_file, ids);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  for (const io::Json& c : expected.at("decode").elements()) {
    SCOPED_TRACE("decode " + c.at("ids").dump());
    EXPECT_EQ(tok.decode(ids_of(c.at("ids")), true), c.get_string("decoded"));
  }
}

}  // namespace
}  // namespace hp::data
