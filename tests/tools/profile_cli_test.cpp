// `hp train ... --profile` writes the Chrome trace and prints the time tables; `hp bench peak`
// measures, caches and re-reads the GEMM peaks MFU divides by, and survives a corrupt cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "has.h"
#include "hp/io/json.h"

namespace hp::cli {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::run_hp;

using test::has;

class ProfileCli : public test::CliTest {
 protected:
  ProfileCli() : CliTest("hp_profile_cli_") {}
  void SetUp() override {
    CliTest::SetUp();
    {
      std::ofstream corpus(dir_ / "corpus.txt");
      for (int i = 0; i < 200; ++i) corpus << "In the beginning was the word, line " << i << ".\n";
    }
    std::ofstream(dir_ / "tiny.yaml") << "model: {arch: llama, hidden: 32, layers: 1, heads: 2, "
                                         "kv_heads: 1, intermediate: 64, vocab: 300}\n"
                                      << "data: {path: " << (dir_ / "corpus.txt").string() << "}\n"
                                      << "training: {steps: 4, batch_size: 2, seq_len: 16}\n"
                                      << "metrics: {peak_tflops: 1.0, progress: none}\n"
                                      << "checkpoint: {save_final: false}\n"
                                      << "run: {dir: " << (dir_ / "run").string() << "}\n";
  }
  std::string peak(const std::string& flags) const {
    return "XDG_CACHE_HOME=" + (dir_ / "cache").string() + " " + test::hp_binary() +
           " bench peak --dtype f32 --seconds 0.2 " + flags;
  }
};

TEST_F(ProfileCli, TrainProfileWritesTheTraceAndPrintsTheTables) {
  const auto r = run_hp("train " + (dir_ / "tiny.yaml").string() + " --profile");
  ASSERT_EQ(r.code, 0) << r.output;
  const fs::path trace = dir_ / "run" / "trace.json";
  ASSERT_TRUE(fs::exists(trace)) << r.output;
  // Throws (fails the test) unless valid JSON.
  const io::Json j = io::read_json_file(trace.string());
  size_t complete = 0;
  for (const io::Json& e : j.at("traceEvents").elements()) complete += e.get_string("ph") == "X";
  EXPECT_GT(complete, 100u);
  EXPECT_TRUE(has(r.output, "profile: steps 2..4 traced in " + trace.string())) << r.output;
  EXPECT_TRUE(has(r.output, "profile of 3 step(s)")) << r.output;
  EXPECT_TRUE(has(r.output, "model.layers.0")) << r.output;
  EXPECT_TRUE(has(r.output, "MFU against metrics.peak_tflops = 1.000 TFLOP/s")) << r.output;
}

TEST_F(ProfileCli, TrainWithoutProfileWritesNoTrace) {
  const auto r = run_hp("train " + (dir_ / "tiny.yaml").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run" / "trace.json"));
  EXPECT_FALSE(has(r.output, "profile:")) << r.output;
  EXPECT_FALSE(has(r.output, "profile of")) << r.output;
  EXPECT_FALSE(has(r.output, "is above 100%")) << r.output;  // 1 TFLOP/s: no 2-core CPU beats it
  const auto typo = run_hp("train " + (dir_ / "tiny.yaml").string() + " --profil");
  EXPECT_EQ(typo.code, 2) << typo.output;
  EXPECT_TRUE(has(typo.output, "unknown flag '--profil' (did you mean --profile?)")) << typo.output;
}

TEST_F(ProfileCli, BenchPeakMeasuresOnceThenReadsTheCache) {
  const auto first = run_command(peak(""));
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_TRUE(has(first.output, "cache      " + (dir_ / "cache" / "hp" / "peak.json").string()))
      << first.output;
  EXPECT_TRUE(has(first.output, " sgemm, ")) << first.output;
  EXPECT_TRUE(has(first.output, "(now)")) << first.output;
  const auto second = run_command(peak(""));
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_TRUE(has(second.output, "(cached)")) << second.output;
  // --remeasure: three measurements, the best of them and the cached figure kept (the unit
  // tests cover a cached figure above every measurement). One below any CPU's is replaced.
  const fs::path cache = dir_ / "cache" / "hp" / "peak.json";
  const auto cached_gflops = [&] {
    return io::read_json_file(cache.string()).at("peaks").at(0).get_double("gflops");
  };
  {
    io::JsonValue doc =
        io::parse_json_value(io::read_text_file(cache.string(), "test"), cache.string());
    doc["peaks"][0]["gflops"] = 1e-3;
    std::ofstream(cache) << doc.dump();
  }
  const auto again = run_command(peak("--remeasure"));
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(has(again.output, "measuring again (3 of 3)")) << again.output;
  EXPECT_GT(cached_gflops(), 1e-3) << again.output;
  const auto no_time = run_hp("bench peak --seconds 0");
  EXPECT_EQ(no_time.code, 2) << no_time.output;
  EXPECT_TRUE(has(no_time.output, "--seconds expects a duration in (0, 600] seconds, got '0'"))
      << no_time.output;

  std::ofstream(dir_ / "cache" / "hp" / "peak.json") << "{ not json";
  const auto corrupt = run_command(peak(""));
  EXPECT_EQ(corrupt.code, 0) << corrupt.output;
  EXPECT_TRUE(has(corrupt.output, "warning: ignoring the corrupt GEMM peak cache"))
      << corrupt.output;
  EXPECT_TRUE(has(corrupt.output, "(now)")) << corrupt.output;

  const auto bad = run_hp("bench peak --dtype f16");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_TRUE(has(bad.output, "--dtype expects f32, bf16 or both, got 'f16'")) << bad.output;
  const auto typo = run_hp("bench peak --remeasur");
  EXPECT_TRUE(has(typo.output, "unknown flag '--remeasur' (did you mean --remeasure?)"))
      << typo.output;
}

TEST_F(ProfileCli, MfuAbovePeakIsFlagged) {
  // A denominator far below any CPU's speed: the summary says the peak, not the run, is wrong.
  const auto r = run_hp("train " + (dir_ / "tiny.yaml").string() +
                        " --set metrics.peak_tflops=0.000001");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "% is above 100%: metrics.peak_tflops = 0.000 TFLOP/s (set in the "
                            "config) is below what this run reached"))
      << r.output;
  EXPECT_TRUE(has(r.output, "hp bench peak --remeasure")) << r.output;
}

TEST_F(ProfileCli, TrainNamesTheCachedPeak) {
  // Cached by bench peak (whatever the load), then used by a run that does not pin the peak.
  ASSERT_EQ(run_command(peak("")).code, 0);
  std::ofstream(dir_ / "f32.yaml") << "model: {arch: llama, hidden: 32, layers: 1, heads: 2, "
                                      "kv_heads: 1, intermediate: 64, vocab: 300}\n"
                                   << "data: {path: " << (dir_ / "corpus.txt").string() << "}\n"
                                   << "training: {steps: 1, batch_size: 2, seq_len: 16, "
                                      "mixed_precision: f32}\n"
                                   << "metrics: {progress: none}\n"
                                   << "checkpoint: {save_final: false}\n"
                                   << "run: {dir: " << (dir_ / "run32").string() << "}\n";
  const auto r = run_command("XDG_CACHE_HOME=" + (dir_ / "cache").string() + " " +
                             test::hp_binary() + " train " + (dir_ / "f32.yaml").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "MFU against the cached f32 GEMM peak ")) << r.output;
  EXPECT_TRUE(has(r.output, " sgemm, ")) << r.output;
  EXPECT_TRUE(has(r.output, (dir_ / "cache" / "hp" / "peak.json").string())) << r.output;
}

}  // namespace
}  // namespace hp::cli
