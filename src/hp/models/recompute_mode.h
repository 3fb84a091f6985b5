// Which decoder layers recompute.h makes recompute regions (RecomputeSpec::mode). Its own small
// header because the train config (train/config.h: recompute.mode) holds this very type, and
// including recompute.h there would pull the whole model into every file that reads the config.
#pragma once

#include <span>

#include "hp/core/enum_names.h"

namespace hp::models {

// none | full (every decoder layer) | selective (every_k_layers, modules: recompute.h).
enum class RecomputeMode { none, full, selective };

// The spellings (recompute.mode in the YAML, and messages), in the order "must be one of" lists
// them.
std::span<const EnumName<RecomputeMode>> enum_names(RecomputeMode);

}  // namespace hp::models
