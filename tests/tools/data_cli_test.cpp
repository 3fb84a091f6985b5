// `hp data prepare` / `hp data info` from the command line: the fixture's bytes from text and
// gzip/zstd JSONL, the same bytes for any --workers, usage errors (unknown flags with a
// did-you-mean, missing --out, flags of the other format) and input errors (a bad JSONL line by
// FILE:LINE; --skip-bad-lines with a count) exit 2 with one line naming the fault; a killed run
// leaves no PREFIX.idx and the next one resumes.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli_run.h"
#include "has.h"
#include "test_dir.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::run_hp;

const std::string kFixtures = std::string(HP_TEST_DIR) + "/../data/fixtures/indexed/";

using test::has;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class DataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::hp_binary())) << "build target hp_cli";
    dir_ = fs::temp_directory_path() / ("hp_data_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void expect_fixture(const std::string& prefix) {
    EXPECT_EQ(slurp(prefix + ".bin"), slurp(kFixtures + "corpus.bin")) << prefix;
    EXPECT_EQ(slurp(prefix + ".idx"), slurp(kFixtures + "corpus.idx")) << prefix;
  }
  fs::path dir_;
};

TEST_F(DataCli, PreparesTheFixtureFromTextAndCompressedJsonl) {
  auto r = run_hp("data prepare " + kFixtures + "corpus.txt --doc-separator '\\n\\n' --out " +
                  path("t") + " --workers 3");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_fixture(path("t"));
  EXPECT_TRUE(has(r.output, "4 documents, 173 tokens (uint16) from 1 file(s)")) << r.output;
  EXPECT_TRUE(has(r.output, "with 3 worker(s)")) << r.output;
  EXPECT_TRUE(has(r.output, "data: {format: indexed, path: " + path("t") + "}")) << r.output;
  EXPECT_TRUE(has(r.output, "prepare: 100.0%")) << r.output;  // the progress line
  r = run_hp("data info " + path("t"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "dtype      uint16")) << r.output;
  EXPECT_TRUE(has(r.output, "documents  4")) << r.output;
  EXPECT_TRUE(has(r.output, "tokens     173")) << r.output;

  // The same documents as compressed JSONL (the system's gzip and zstd tools, where installed).
  for (const auto& [tool, ext] : {std::pair{"gzip", ".gz"}, std::pair{"zstd", ".zst"}}) {
    if (run_command(std::string("command -v ") + tool).code != 0) continue;
    const std::string in = path(std::string("c.jsonl") + ext);
    ASSERT_EQ(run_command(std::string(tool) + " -c " + kFixtures + "corpus.jsonl > " + in).code, 0);
    r = run_hp("data prepare " + in + " --format jsonl --field text --quiet --out " +
               path(std::string("j") + ext));
    ASSERT_EQ(r.code, 0) << r.output;
    expect_fixture(path(std::string("j") + ext));
    EXPECT_TRUE(has(r.output, "dropped 1 empty document(s)")) << r.output;
    EXPECT_FALSE(has(r.output, "prepare: ")) << r.output;  // --quiet: no progress line
  }
}

// hp data info reports the largest id from the record hp data prepare wrote (PREFIX.ids.json);
// --verify scans the tokens (a dataset written by other tools has no record) and writes it.
TEST_F(DataCli, InfoReportsTheLargestIdAndVerifyScans) {
  auto r = run_hp("data prepare " + kFixtures +
                  "corpus.txt --doc-separator '\\n\\n' --quiet --out " + path("t"));
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(fs::exists(path("t.ids.json")));
  r = run_hp("data info " + path("t"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "max id     256 at document 0, offset ")) << r.output;
  EXPECT_TRUE(has(r.output, "; " + path("t.ids.json") + ")")) << r.output;
  fs::remove(path("t.ids.json"));
  r = run_hp("data info " + path("t") + " --verify");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "max id     256 at document 0, offset ")) << r.output;
  EXPECT_TRUE(has(r.output, "; scanned)")) << r.output;
  EXPECT_TRUE(fs::exists(path("t.ids.json")));
}

TEST_F(DataCli, SameBytesForAnyWorkerCount) {
  // ~5 MB: about 20 batches of 256 KiB for the workers to share.
  std::string text;
  for (int i = 0; i < 300000; ++i) text += "document " + std::to_string(i * 31) + "\n\n";
  std::ofstream(path("big.txt")) << text;
  for (const char* w : {"1", "4"}) {
    const auto r = run_hp("data prepare " + path("big.txt") + " --doc-separator '\\n\\n' --quiet " +
                          "--workers " + w + " --out " + path(std::string("w") + w));
    ASSERT_EQ(r.code, 0) << r.output;
  }
  EXPECT_EQ(slurp(path("w1.bin")), slurp(path("w4.bin")));
  EXPECT_EQ(slurp(path("w1.idx")), slurp(path("w4.idx")));
  EXPECT_EQ(slurp(path("w1.idx")).size(), 34u + 300000 * 20 + 8);
}

TEST_F(DataCli, UsageErrorsExit2NamingTheFlag) {
  const std::string in = kFixtures + "corpus.txt";
  const std::pair<std::string, std::string> cases[] = {
      {"data prepare " + in + " --out x --worker 2",
       "hp data: unknown flag '--worker' (did you mean --workers?)"},
      {"data prepare " + in + " --out x --skip-bad-line", "did you mean --skip-bad-lines?"},
      {"data prepare " + in, "--out PREFIX is required"},
      {"data prepare --out x", "no INPUT given"},
      {"data prepare " + in + " --out x --format csv", "--format expects text or jsonl"},
      {"data prepare " + in + " --out x --field body", "--field applies to --format jsonl"},
      {"data prepare " + in + " --out x --format jsonl --doc-separator x",
       "--doc-separator applies to --format text"},
      {"data prepare " + in + " --out x --skip-bad-lines", "--skip-bad-lines applies to"},
      {"data prepare " + in + " --out x --workers 0", "--workers expects an integer in [1, 4096]"},
      {"data prepare " + in + " --out x --doc-separator '\\q'", "unknown escape \\q"},
      {"data prepare " + in + " --out x --tokenizer a --model b", "not both"},
      {"data prepare " + in + " --out x --model " + path("nomodel"), "has no tokenizer.json"},
      {"data frobnicate", "unknown subcommand 'frobnicate'"},
      {"data info", "usage: hp data info PREFIX"}};
  for (const auto& [cmd, want] : cases) {
    const auto r = run_hp(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.output;
    EXPECT_TRUE(has(r.output, want)) << cmd << ": " << r.output;
    EXPECT_FALSE(fs::exists("x.idx")) << cmd;
  }
}

TEST_F(DataCli, InputErrorsExit2NamingFileAndLine) {
  std::ofstream(path("bad.jsonl"))
      << "{\"text\": \"a\"}\n\n{\"text\": 1}\n{\"text\": \"b\"}\nnope\n";
  auto r =
      run_hp("data prepare " + path("bad.jsonl") + " --format jsonl --quiet --out " + path("bad"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "hp data: [data] " + path("bad.jsonl") +
                                ":3: the line field 'text' is a number, not a string"))
      << r.output;
  EXPECT_FALSE(fs::exists(path("bad.idx")));
  EXPECT_FALSE(fs::exists(path("bad.bin.partial")));
  r = run_hp("data prepare " + path("bad.jsonl") + " --format jsonl --skip-bad-lines --quiet " +
             "--out " + path("bad"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "skipped 2 bad line(s); the first: " + path("bad.jsonl") + ":3:"))
      << r.output;
  EXPECT_TRUE(has(r.output, "2 documents")) << r.output;
  // The dataset exists now: a second run needs --overwrite.
  r = run_hp("data prepare " + path("bad.jsonl") + " --format jsonl --skip-bad-lines --out " +
             path("bad"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "already exists (--overwrite replaces the dataset)")) << r.output;
  // A corrupt index, by hp data info.
  std::ofstream(path("junk.idx")) << "not an index at all, just some text of 50 bytes";
  std::ofstream(path("junk.bin")) << "";
  r = run_hp("data info " + path("junk"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, path("junk.idx") + "' does not start with the magic MMIDIDX"))
      << r.output;
}

// SIGKILL in the middle of a prepare: no PREFIX.idx (nothing can mistake the partial dataset for
// a complete one); the next run resumes from the last resume point to the same bytes.
TEST_F(DataCli, KilledRunLeavesNoIndexAndResumes) {
  // ~68 MB of text: long enough to kill mid-way (one worker: ~0.5 s here). Resume points come
  // every 256 MB, so this checks the no-.idx promise and a clean rerun; resuming from a resume
  // point is covered in tests/data/prepare_test.cpp.
  {
    std::ofstream big(path("big.txt"));
    std::string block;
    for (int i = 0; i < 20000; ++i) block += "line " + std::to_string(i) + " of a long corpus\n\n";
    for (int rep = 0; rep < 120; ++rep) big << block;
  }
  const std::string cmd = test::hp_binary() + " data prepare " + path("big.txt") +
                          " --doc-separator '\\n\\n' --workers 1 --quiet --out " + path("k");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > /dev/null 2>&1").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill once the partial .bin holds data (the run is under way).
  for (int i = 0; i < 2000; ++i) {
    std::error_code ec;
    const auto size = fs::file_size(path("k.bin.partial"), ec);
    if (!ec && size > (1u << 20)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the prepare finished before it could be killed";
  EXPECT_FALSE(fs::exists(path("k.idx")));
  EXPECT_FALSE(fs::exists(path("k.bin")));
  auto r = run_hp("data info " + path("k"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "is incomplete")) << r.output;
  EXPECT_TRUE(has(r.output, "did not finish")) << r.output;
  r = run_command(cmd);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(path("k.idx")));
  EXPECT_FALSE(fs::exists(path("k.bin.partial")));
  r = run_hp("data info " + path("k"));
  EXPECT_TRUE(has(r.output, "documents  2400000")) << r.output;
}

}  // namespace
}  // namespace hp::cli
