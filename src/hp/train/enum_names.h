// The name tables of enums live in core (core/enum_names.h) so that lower layers can spell their
// own enums; the config, its schema and the tools name them as train::EnumName / train::enum_name.
#pragma once

#include "hp/core/enum_names.h"

namespace hp::train {

using hp::Enum;
using hp::enum_index;
using hp::enum_name;
using hp::EnumName;

}  // namespace hp::train
