// The first `bytes` of the bundled KJV corpus as a file in the temp directory (written once per
// process and name): small, real text for trainer tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_dir.h"

namespace hp::testing {

inline std::string corpus_prefix(const std::string& name, size_t bytes) {
  // Per process: ctest runs every test of a binary as its own process, several at once, and a file
  // one of them truncates to rewrite must not be what another is reading.
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  (name + "_" + std::to_string(::getpid()) + "_corpus.txt");
  std::ifstream in(std::string(HP_TEST_DIR) + "/../../data/kjv.txt", std::ios::binary);
  std::string text(bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

}  // namespace hp::testing
