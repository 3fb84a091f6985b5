// The directory of a test binary's layer (tests/<layer>), where its committed fixtures live.
// Defined in a source file CMake generates per test binary (hp_test_paths in CMakeLists.txt), so
// that no test file's compile command holds the checkout's path. A constant, usable during static
// initialization.
#pragma once

namespace hp::test {
extern const char* const kTestDir;
}  // namespace hp::test

#define HP_TEST_DIR (::hp::test::kTestDir)
