// The cached GEMM peak (kernels/cpu/gemm_peak.h): measured once and written, read back, and a
// corrupt or unwritable cache costing a warning and a fresh measurement, never an error; the
// cache keeps the best figure observed, and a loaded machine's figure is not cached. The tests
// measure for 0.2 s (at least 5 calls of 2048³ multiplies), not the 2 s of a real cached peak.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "has.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/io/json.h"
#include "hp/kernels/cpu/gemm_peak.h"

namespace hp::kernels {
namespace {

namespace fs = std::filesystem;
using io::JsonValue;

using test::has;

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

class PeakCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hp_peak_cache_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string cache() const { return (dir_ / "hp" / "peak.json").string(); }
  // Written whatever the machine's load (the load gate has its own test).
  PeakOptions always(const std::string& path) const {
    PeakOptions o;
    o.cache_path = path;
    o.max_excess_load = -1;
    o.seconds = 0.2;
    return o;
  }
  io::Json read(const std::string& path) const { return io::read_json_file(path); }
  fs::path dir_;
};

TEST_F(PeakCache, MeasuresOnceWritesTheEntryAndReadsItBack) {
  const GemmPeak first = gemm_peak(DType::f32, always(cache()));
  EXPECT_FALSE(first.cached);
  EXPECT_GT(first.gflops, 0);
  EXPECT_TRUE(first.library == "OpenBLAS sgemm" || first.library == "oneDNN sgemm")
      << first.library;
  EXPECT_EQ(first.cache_path, cache());
  EXPECT_TRUE(first.warnings.empty()) << joined(first.warnings);
  const io::Json doc = read(cache());
  ASSERT_EQ(doc.at("peaks").size(), 1u);
  const io::Json e = doc.at("peaks").at(0);
  const PeakKey key = peak_key(DType::f32);
  EXPECT_EQ(e.get_string("cpu"), key.cpu);
  EXPECT_EQ(e.get_string("isa"), key.isa);
  EXPECT_EQ(e.get_int("threads"), num_threads());
  EXPECT_EQ(e.get_string("dtype"), "f32");
  EXPECT_DOUBLE_EQ(e.get_double("gflops"), first.gflops);

  const GemmPeak second = gemm_peak(DType::f32, always(cache()));
  EXPECT_TRUE(second.cached);
  EXPECT_DOUBLE_EQ(second.gflops, first.gflops);
  EXPECT_EQ(second.measured_at, first.measured_at);
  EXPECT_TRUE(has(describe_peak(second), "the cached f32 GEMM peak")) << describe_peak(second);
  EXPECT_TRUE(has(describe_peak(second), first.library)) << describe_peak(second);
  EXPECT_TRUE(has(describe_peak(second), cache())) << describe_peak(second);
  EXPECT_TRUE(has(describe_peak(second), "measured " + first.measured_at.substr(0, 10)));

  // Another thread count is another machine as far as the peak goes: a second entry.
  const int threads = num_threads();
  set_num_threads(threads == 1 ? 2 : 1);
  const GemmPeak other = gemm_peak(DType::f32, always(cache()));
  set_num_threads(threads);
  EXPECT_FALSE(other.cached);
  EXPECT_EQ(read(cache()).at("peaks").size(), 2u);

  // --remeasure updates the entry rather than adding one.
  PeakOptions again = always(cache());
  again.remeasure = true;
  EXPECT_GT(gemm_peak(DType::f32, again).gflops, 0);
  EXPECT_EQ(read(cache()).at("peaks").size(), 2u);
}

// Writes this machine's f32 entry with the given figure.
void write_entry(const std::string& path, double gflops) {
  const PeakKey key = peak_key(DType::f32);
  const JsonValue doc = JsonValue::object(
      {{"format", 1},
       {"peaks",
        JsonValue::array({JsonValue::object({{"cpu", key.cpu},
                                             {"isa", key.isa},
                                             {"threads", key.threads},
                                             {"dtype", "f32"},
                                             {"gflops", gflops},
                                             {"library", "OpenBLAS sgemm"},
                                             {"measured_at", "2026-01-01T00:00:00Z"}})})}});
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << doc.dump();
}

TEST_F(PeakCache, RemeasureKeepsTheBestFigureObserved) {
  // A cached figure no CPU here reaches: a new measurement is lower, so the cache keeps its own.
  write_entry(cache(), 1e9);
  PeakOptions again = always(cache());
  again.remeasure = true;
  const GemmPeak kept = gemm_peak(DType::f32, again);
  EXPECT_TRUE(kept.cached);
  EXPECT_DOUBLE_EQ(kept.gflops, 1e9);
  EXPECT_EQ(kept.measured_at, "2026-01-01T00:00:00Z");
  EXPECT_TRUE(has(joined(kept.warnings), "kept the cached f32 GEMM peak 1000000000.0 GFLOP/s"))
      << joined(kept.warnings);
  EXPECT_DOUBLE_EQ(read(cache()).at("peaks").at(0).get_double("gflops"), 1e9);

  // A cached figure every CPU beats (1 MFLOP/s): replaced by the measurement.
  write_entry(cache(), 1e-3);
  const GemmPeak better = gemm_peak(DType::f32, again);
  EXPECT_FALSE(better.cached);
  EXPECT_GT(better.gflops, 1e-3);
  ASSERT_EQ(read(cache()).at("peaks").size(), 1u);
  EXPECT_DOUBLE_EQ(read(cache()).at("peaks").at(0).get_double("gflops"), better.gflops);

  // Without remeasure the cached figure is used as it is.
  write_entry(cache(), 1e-3);
  EXPECT_DOUBLE_EQ(gemm_peak(DType::f32, always(cache())).gflops, 1e-3);
}

TEST_F(PeakCache, CorruptCacheWarnsAndMeasuresAfresh) {
  const std::string corrupt[] = {
      "{\"format\": 1, \"peaks\": [",  // cut short
      "[1, 2, 3]",
      "{\"format\": 7, \"peaks\": []}",
      // this machine's entry with fields of the wrong type
      "{\"format\": 1, \"peaks\": [{\"cpu\": 5, \"gflops\": \"fast\"}, 3]}",
  };
  for (const std::string& text : corrupt) {
    fs::create_directories(fs::path(cache()).parent_path());
    std::ofstream(cache()) << text;
    const GemmPeak p = gemm_peak(DType::f32, always(cache()));
    EXPECT_FALSE(p.cached) << text;
    EXPECT_GT(p.gflops, 0) << text;
    // Rewritten whole and valid, with this measurement in it.
    const io::Json doc = read(cache());
    EXPECT_EQ(doc.get_int("format"), 1) << text;
    bool found = false;
    for (const io::Json& e : doc.at("peaks").elements())
      found = found || (e.is_object() && e.contains("gflops") && e.at("gflops").is_number() &&
                        e.get_double("gflops") == p.gflops);
    EXPECT_TRUE(found) << text << "\n" << doc.dump();
  }
  // The first three are corrupt as files (the fourth only lacks a usable entry): said so.
  std::ofstream(cache()) << corrupt[0];
  const GemmPeak p = gemm_peak(DType::f32, always(cache()));
  EXPECT_TRUE(has(joined(p.warnings), "ignoring the corrupt GEMM peak cache " + cache()))
      << joined(p.warnings);
}

TEST_F(PeakCache, MalformedEntryOfThisMachineIsMeasuredAgain) {
  const PeakKey key = peak_key(DType::f32);
  const JsonValue doc =
      JsonValue::object({{"format", 1},
                         {"peaks", JsonValue::array({JsonValue::object({{"cpu", key.cpu},
                                                                        {"isa", key.isa},
                                                                        {"threads", key.threads},
                                                                        {"dtype", "f32"},
                                                                        {"gflops", -3}})})}});
  fs::create_directories(fs::path(cache()).parent_path());
  std::ofstream(cache()) << doc.dump();
  const GemmPeak p = gemm_peak(DType::f32, always(cache()));
  EXPECT_FALSE(p.cached);
  EXPECT_GT(p.gflops, 0);
  EXPECT_TRUE(has(joined(p.warnings), "ignoring the f32 entry")) << joined(p.warnings);
  EXPECT_EQ(read(cache()).at("peaks").size(), 1u);
}

TEST_F(PeakCache, UnwritableCacheWarnsAndStillMeasures) {
  // A path below a regular file can be neither created nor written (whoever runs the test).
  std::ofstream(dir_ / "file") << "x";
  const std::string path = (dir_ / "file" / "hp" / "peak.json").string();
  const GemmPeak p = gemm_peak(DType::f32, always(path));
  EXPECT_GT(p.gflops, 0);
  EXPECT_FALSE(p.cached);
  EXPECT_EQ(p.cache_path, "");
  EXPECT_TRUE(has(joined(p.warnings), "cannot write the GEMM peak cache " + path))
      << joined(p.warnings);
  EXPECT_TRUE(has(describe_peak(p), "not cached")) << describe_peak(p);
}

TEST_F(PeakCache, MeasurementUnderLoadIsNotCached) {
  // Measuring on every CPU with no excess allowed: any load at all counts as busy.
  const int threads = num_threads();
  const int cpus = int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  set_num_threads(cpus);
  PeakOptions o;
  o.cache_path = cache();
  o.max_excess_load = 0;
  const GemmPeak p = gemm_peak(DType::f32, o);
  set_num_threads(threads);
  if (p.load_average <= 0) GTEST_SKIP() << "load average 0: this machine is idle";
  EXPECT_FALSE(fs::exists(cache()));
  EXPECT_EQ(p.cache_path, "");
  EXPECT_TRUE(has(joined(p.warnings), "measured under load")) << joined(p.warnings);
  EXPECT_TRUE(has(joined(p.warnings), "for " + std::to_string(cpus) + " measuring threads on " +
                                          std::to_string(cpus) + " CPUs"))
      << joined(p.warnings);
}

TEST_F(PeakCache, LoadOnTheCpusTheMeasurementLeavesFreeIsAllowed) {
  // One measuring thread on a machine with more CPUs tolerates a load of (CPUs - 1): the figure
  // is cached as long as the load stays below that (no other test here loads the machine so).
  const int cpus = int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (cpus < 2) GTEST_SKIP() << "one CPU: no CPU is left free";
  const int threads = num_threads();
  set_num_threads(1);
  PeakOptions o;
  o.cache_path = cache();
  o.max_excess_load = 0;
  o.seconds = 0.2;
  const GemmPeak p = gemm_peak(DType::f32, o);
  set_num_threads(threads);
  if (p.load_average > cpus - 1)
    GTEST_SKIP() << "load average " << p.load_average << " on " << cpus << " CPUs";
  EXPECT_EQ(p.cache_path, cache()) << joined(p.warnings);
  EXPECT_TRUE(fs::exists(cache()));
}

TEST_F(PeakCache, Bf16PeakNamesItsLibrary) {
  const GemmPeak p = gemm_peak(DType::bf16, always(cache()));
  EXPECT_GT(p.gflops, 0);
  // A native oneDNN kernel, or the f32 ceiling with the reason.
  if (p.library.rfind("oneDNN bf16 matmul", 0) == 0) {
    EXPECT_EQ(p.note, "");
  } else {
    EXPECT_TRUE(p.library == "OpenBLAS sgemm" || p.library == "oneDNN sgemm") << p.library;
    EXPECT_TRUE(has(p.note, "f32 ceiling")) << p.note;
  }
  EXPECT_EQ(read(cache()).at("peaks").at(0).get_string("dtype"), "bf16");
}

TEST(PeakCachePath, FollowsXdgCacheHome) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", "/some/cache", 1);
  EXPECT_EQ(default_peak_cache_path(), "/some/cache/hp/peak.json");
  setenv("XDG_CACHE_HOME", "relative/cache", 1);  // invalid per the XDG spec: ignored
  const char* home = std::getenv("HOME");
  if (home && *home) {
    EXPECT_EQ(default_peak_cache_path(),
              (std::filesystem::path(home) / ".cache" / "hp" / "peak.json").string());
  }
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
}

TEST(PeakMeasure, OtherDtypesAreRejected) {
  EXPECT_THROW(measure_gemm_peak(DType::i32, 0.1), ValueError);
}

}  // namespace
}  // namespace hp::kernels
