#include "hp/fusion/mode.h"

#include <atomic>
#include <cstdlib>

#include "hp/core/error.h"

namespace hp::fusion {

namespace {
// The mode set by set_mode, as an int (-1: not set). Read on every block's forward: one atomic
// load. Relaxed: runs set it before their threads start and reset it after they join.
std::atomic<int> g_set{-1};
}  // namespace

Mode parse_mode(const std::string& s, const std::string& key) {
  for (const EnumName<Mode>& n : enum_names(Mode{}))
    if (s == n.name) return n.value;
  HP_THROW(ValueError, "fusion", key, " = '", s, "' is not a fusion mode (none | lazy | auto)");
}

const char* mode_name(Mode m) {
  return enum_names(m)[enum_index(m)].name;
}

std::optional<Mode> env_mode() {
  static const std::optional<Mode> m = []() -> std::optional<Mode> {
    const char* v = std::getenv("HP_FUSION");
    if (!v || !*v) return std::nullopt;
    return parse_mode(v, "HP_FUSION");
  }();
  return m;
}

Mode mode() {
  const int s = g_set.load(std::memory_order_relaxed);
  if (s >= 0) return static_cast<Mode>(s);
  return env_mode().value_or(Mode::auto_);
}

void set_mode(Mode m) {
  g_set.store(static_cast<int>(m), std::memory_order_relaxed);
}

void reset_mode() {
  g_set.store(-1, std::memory_order_relaxed);
}

ModeScope::ModeScope(Mode m) : prev_(g_set.load(std::memory_order_relaxed)) {
  set_mode(m);
}

ModeScope::~ModeScope() {
  g_set.store(prev_, std::memory_order_relaxed);
}

std::span<const EnumName<Mode>> enum_names(Mode) {
  using enum Mode;
  static constexpr EnumName<Mode> names[] = {{"none", none}, {"lazy", lazy}, {"auto", auto_}};
  return names;
}

}  // namespace hp::fusion
