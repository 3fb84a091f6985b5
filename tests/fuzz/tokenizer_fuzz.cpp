// libFuzzer target for the tokenizer: on valid UTF-8, encode never fails, ids are in range, and
// decoding gives the text back for the lossless styles (byte-level BPE without a normalizer or
// whitespace-stripping added tokens: GPT-2, Llama-3, DeepSeek-V3, and the Kimi tiktoken
// directory); invalid UTF-8 is a ValueError. The styles run every pipeline component hp has
// (regex Split, Metaspace, byte fallback, NFC / NFKC / Lowercase, the decoders).
//
//   ./build-fuzz/hp_tokenizer_fuzz -max_total_time=300 corpus-tok/
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hp/core/error.h"
#include "hp/io/tokenizer.h"
#include "hp/io/unicode.h"

namespace {
struct Style {
  hp::io::Tokenizer tok;
  bool lossless;
};

const std::vector<Style>& styles() {
  static const std::vector<Style> all = [] {
    const std::string dir = HP_SOURCE_DIR "/tests/io/fixtures/tokenizers/";
    std::vector<Style> v;
    for (const char* name : {"gpt2", "llama3", "deepseek_v3"})
      v.push_back({hp::io::Tokenizer::from_file(dir + name + ".tokenizer.json"), true});
    v.push_back({hp::io::Tokenizer::from_file(dir + "kimi"), true});
    for (const char* name : {"qwen2", "llama2", "mistral", "misc"})
      v.push_back({hp::io::Tokenizer::from_file(dir + name + ".tokenizer.json"), false});
    return v;
  }();
  return all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  bool valid = hp::io::detail::find_invalid_utf8(text) == std::string_view::npos;
  for (const Style& s : styles()) {
    try {
      auto ids = s.tok.encode(text, false);
      if (!valid) __builtin_trap();
      for (int32_t id : ids)
        if (id < 0 || id >= s.tok.vocab_size()) __builtin_trap();
      std::string back = s.tok.decode(ids);
      if (s.lossless && back != text) __builtin_trap();
    } catch (const hp::ValueError&) {
      if (valid) __builtin_trap();
    }
  }
  return 0;
}
