// The message of the hp::Error fn throws, or "(no error)" when it throws none: for tests that
// compare error text.
#pragma once

#include <functional>
#include <string>

#include "hp/core/error.h"

namespace hp::testing {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hp::testing
