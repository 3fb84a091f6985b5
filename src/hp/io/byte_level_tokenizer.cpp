// The byte-level vocabulary as a tokenizer.json (byte_level_tokenizer.h).
#include "hp/io/byte_level_tokenizer.h"

#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"

namespace hp::io {

std::string byte_level_tokenizer_json(std::string_view separator, int32_t separator_id) {
  JsonValue vocab = JsonValue::object();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    detail::append_byte_level(key, std::string(1, static_cast<char>(b)));
    vocab[key] = b;
  }
  // The fields `tokenizers` writes for these components, with their defaults.
  const JsonValue byte_level = JsonValue::object({{"type", "ByteLevel"},
                                                  {"add_prefix_space", false},
                                                  {"trim_offsets", true},
                                                  {"use_regex", true}});
  const JsonValue added = JsonValue::object({{"id", separator_id},
                                             {"content", separator},
                                             {"single_word", false},
                                             {"lstrip", false},
                                             {"rstrip", false},
                                             {"normalized", false},
                                             {"special", true}});
  const JsonValue model = JsonValue::object({{"type", "BPE"},
                                             {"dropout", nullptr},
                                             {"unk_token", nullptr},
                                             {"continuing_subword_prefix", nullptr},
                                             {"end_of_word_suffix", nullptr},
                                             {"fuse_unk", false},
                                             {"byte_fallback", false},
                                             {"ignore_merges", false},
                                             {"vocab", vocab},
                                             {"merges", JsonValue::array()}});
  return JsonValue::object({{"version", "1.0"},
                            {"truncation", nullptr},
                            {"padding", nullptr},
                            {"added_tokens", JsonValue::array({added})},
                            {"normalizer", nullptr},
                            {"pre_tokenizer", byte_level},
                            {"post_processor", nullptr},
                            {"decoder", byte_level},
                            {"model", model}})
      .dump(2);
}

}  // namespace hp::io
