// Whether text (an error message, a command's output) contains a part: the one substring check
// of the tests that read messages.
#pragma once

#include <string>
#include <string_view>

namespace hp::test {

inline bool has(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace hp::test
