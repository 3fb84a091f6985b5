#include "hp/core/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hp/core/error.h"

namespace hp {

int64_t parse_byte_size(std::string_view text, std::string_view key, std::string_view component) {
  struct Unit {
    const char* name;
    double scale;
  };
  static constexpr Unit kUnits[] = {{"B", 1},          {"KiB", 1024.0},       {"MiB", 1048576.0},
                                    {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3},
                                    {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12}};
  auto bad = [&](const std::string& why) {
    HP_THROW(ValueError, component, key, ": bad size '", text, "' (", why,
             "; expected a number with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB, "
             "e.g. 6GiB)");
  };
  const std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) bad("no number");
  const std::string number = s.substr(0, i);  // strtod's end pointer points into it
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (*end != '\0') bad("malformed number");
  size_t u = i;
  while (u < s.size() && s[u] == ' ') ++u;
  const std::string unit = s.substr(u);
  double scale = unit.empty() ? 1.0 : 0.0;
  for (const Unit& k : kUnits)
    if (unit == k.name) scale = k.scale;
  if (scale == 0) bad("unknown unit '" + unit + "'");
  const double bytes = std::floor(value * scale);
  if (!(bytes < 9.2e18)) bad("too large");
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, unit[u]);
  return buf;
}

}  // namespace hp
