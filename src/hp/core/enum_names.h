// Enums spelled by name in text: the config's YAML (train/schema.h reads and writes them), the
// run's log lines, `hp memory plan`, the components' messages. An enum takes part by declaring,
// beside it in its own namespace,
//   std::span<const EnumName<E>> enum_names(E);
// (found by argument-dependent lookup): every value once, with its one spelling, in the order
// messages list them ("must be one of ring|alltoall"). The spellings live in that one table, so a
// value is compared as an enum everywhere and turned back into text only where text is written.
// It lives in core so that a component's own enum (data::DatasetFormat, models::RecomputeMode)
// carries its table in its own layer, and the train config holds that very type.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include "hp/core/error.h"

namespace hp {

template <class E>
concept Enum = std::is_enum_v<E>;

template <Enum E>
struct EnumName {
  const char* name;
  E value;
};

// v's position in its table.
template <Enum E>
size_t enum_index(E v) {
  const std::span<const EnumName<E>> names = enum_names(v);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].value == v) return i;
  HP_THROW(InternalError, "core", "enum value ", static_cast<long long>(v),
           " is missing from its enum_names table");
}

// v's spelling: "1f1b" for PipelineSchedule::one_f_one_b.
template <Enum E>
std::string enum_name(E v) {
  return enum_names(v)[enum_index(v)].name;
}

}  // namespace hp
