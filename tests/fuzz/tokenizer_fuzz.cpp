// libFuzzer target for the tokenizer: on valid UTF-8, encode never fails and decoding gives the
// text back (the GPT-2 and Llama-3 fixtures have no normalizer and no whitespace-stripping added
// tokens, so byte-level BPE is lossless); invalid UTF-8 is a ValueError.
//
//   ./build-fuzz/hp_tokenizer_fuzz -max_total_time=300 corpus-tok/
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hp/core/error.h"
#include "hp/io/tokenizer.h"
#include "hp/io/unicode.h"

namespace {
const hp::io::Tokenizer& fixture(const char* name) {
  static const hp::io::Tokenizer gpt2 = hp::io::Tokenizer::from_file(
      HP_SOURCE_DIR "/tests/io/fixtures/tokenizers/gpt2.tokenizer.json");
  static const hp::io::Tokenizer llama3 = hp::io::Tokenizer::from_file(
      HP_SOURCE_DIR "/tests/io/fixtures/tokenizers/llama3.tokenizer.json");
  static const hp::io::Tokenizer qwen2 = hp::io::Tokenizer::from_file(
      HP_SOURCE_DIR "/tests/io/fixtures/tokenizers/qwen2.tokenizer.json");
  return name[0] == 'g' ? gpt2 : name[0] == 'l' ? llama3 : qwen2;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  bool valid = hp::io::detail::find_invalid_utf8(text) == std::string_view::npos;
  for (const char* name : {"gpt2", "llama3", "qwen2"}) {
    const hp::io::Tokenizer& tok = fixture(name);
    try {
      auto ids = tok.encode(text, false);
      if (!valid) __builtin_trap();
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      std::string back = tok.decode(ids);
      if (name[0] != 'q' && back != text) __builtin_trap();
    } catch (const hp::ValueError&) {
      if (valid) __builtin_trap();
    }
  }
  return 0;
}
