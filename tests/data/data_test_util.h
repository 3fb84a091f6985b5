// Shared helpers for the data/ tests: temp corpora on disk.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/io_test_util.h"  // TempDir, EXPECT_THROW_MSG
#include "test_dir.h"

namespace hp::data::test {

using io::test::TempDir;

// The committed tokenizer.json fixtures of the io tests (gpt2, llama3, qwen2).
inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/../io/fixtures/tokenizers/" + name + ".tokenizer.json";
}

// The committed indexed-dataset fixtures (tools/make_indexed_fixture.py).
inline std::string indexed_fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/indexed/" + name;
}

// Writes `bytes` to `path`, creating parent directories.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Raw little-endian ids (the host is little-endian; dataset.cpp asserts it).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <class T>
void write_tokens(const std::string& path, const std::vector<T>& ids) {
  write_file(path, std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(T)));
}

}  // namespace hp::data::test
