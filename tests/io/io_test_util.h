// Shared helpers for the io/ tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "hp/core/error.h"
#include "test_dir.h"

namespace hp::io::test {

inline std::string fixture(const std::string& rel) {
  return std::string(HP_TEST_DIR) + "/fixtures/" + rel;
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("hp_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace hp::io::test

// Expects `stmt` to throw ErrType whose message contains every one of the given substrings.
#define EXPECT_THROW_MSG(stmt, ErrType, ...)                                \
  do {                                                                      \
    try {                                                                   \
      stmt;                                                                 \
      ADD_FAILURE() << "expected " #ErrType " from " #stmt;                 \
    } catch (const ErrType& e) {                                            \
      for (const char* needle : {__VA_ARGS__})                              \
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)    \
            << "message \"" << e.what() << "\" lacks \"" << needle << "\""; \
    }                                                                       \
  } while (0)
