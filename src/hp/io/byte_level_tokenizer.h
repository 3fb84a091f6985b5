// The byte-level vocabulary (ids 0..255 are the bytes, one separator token after them; hp's text
// data without a tokenizer, data/encoder.h) as a Hugging Face tokenizer.json, so that a model
// trained on it exports with a tokenizer `hp generate` and `tokenizers` load.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hp::io {

// tokenizer.json text: a BPE model without merges over GPT-2's byte ↔ character map (vocab: the
// mapped character of byte b → id b), ByteLevel pre-tokenizer and decoder (no prefix space), and
// `separator` (e.g. "<|endoftext|>") as a special added token with id `separator_id` (256). Any
// valid UTF-8 text encodes to its bytes; the separator's content, written in the text, encodes as
// the separator (as every added token does), and ids of bytes that are not valid UTF-8 on their
// own decode lossily (U+FFFD), as `tokenizers` decodes them.
std::string byte_level_tokenizer_json(std::string_view separator, int32_t separator_id);

}  // namespace hp::io
