// Error types and invariant checks (docs/ARCHITECTURE.md §7).
//
// User errors are typed exceptions whose message starts with "[component]" and names the value at
// fault. Internal invariants use HP_CHECK, which reports file:line. The library never calls exit().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hp {

// Base of every error the library throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad shapes, dtypes, arguments, indices: the caller's fault.
class ValueError : public Error {
 public:
  using Error::Error;
};

// Index or offset outside its valid range.
class IndexError : public ValueError {
 public:
  using ValueError::ValueError;
};

// A broken internal invariant: a bug in the library.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Files, formats, configs (used by io/ and above).
class IoError : public Error {
 public:
  using Error::Error;
};

// An allocation refused because it would exceed a memory budget (core/allocator.h).
class MemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace hp

// Throws ErrType with "[component] ..." built from the streamed arguments.
#define HP_THROW(ErrType, component, ...) \
  throw ErrType(::hp::detail::cat("[", component, "] ", __VA_ARGS__))

// Internal invariant: a failure is a library bug and names file:line.
#define HP_CHECK(cond, ...)                                                                     \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::hp::InternalError(::hp::detail::cat("[internal] ", __FILE__, ":", __LINE__, ": ", \
                                                  "check failed: " #cond " ", ##__VA_ARGS__));  \
  } while (0)
