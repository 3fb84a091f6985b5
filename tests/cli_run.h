// Runs the built `hp` binary from CLI tests: it sits next to the test binaries in the build folder
// (test targets that use it depend on hp_cli, see CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

namespace hp::test {

struct CliResult {
  int code = -1;       // exit status; -1 when it could not run or was killed by a signal
  std::string output;  // stdout + stderr
};

inline std::string hp_binary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "hp").string();
}

// Runs a /bin/sh command line with stderr merged into stdout.
inline CliResult run_command(const std::string& cmd) {
  CliResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `hp ARGS` (ARGS already shell-quoted where needed).
inline CliResult run_hp(const std::string& args) { return run_command(hp_binary() + " " + args); }

// A CLI test with a fresh scratch directory dir_ (<tmp>/<prefix><pid>), removed after the test.
class CliTest : public ::testing::Test {
 protected:
  explicit CliTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(hp_binary())) << "build target hp_cli";
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace hp::test
