// How a dataset's files are laid out (DatasetOptions::format, dataset.h). Its own small header
// because the train config (train/config.h: data.format, eval.format) holds this very type, and
// including dataset.h there would pull the tokenizer into every file that reads the config.
#pragma once

#include <span>

#include "hp/core/enum_names.h"

namespace hp::data {

// text | tokens_u16 | tokens_u32 (raw little-endian ids, documents already separated) |
// indexed (Megatron .bin/.idx) | chat (JSONL conversations, loss on the assistant's tokens).
enum class DatasetFormat { text, tokens_u16, tokens_u32, indexed, chat };

// The spellings (data.format in the YAML, and messages), in the order "must be one of" lists them.
std::span<const EnumName<DatasetFormat>> enum_names(DatasetFormat);

}  // namespace hp::data
