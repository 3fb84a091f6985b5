// `hp mx quantize | dequantize | stats`: runs the built `hp` binary (next to this test binary in
// the build folder; build target hp_cli first) on temp files and checks its outputs bit for bit
// against the library, and that bad input exits 2 with a one-line message naming the flag, file or
// value.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "cli_run.h"
#include "hp/mx/quantize.h"

namespace hp::mx {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;
using test::hp_binary;
using test::run_hp;

template <class T>
std::vector<T> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), {});
  std::vector<T> out(raw.size() / sizeof(T));
  std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(out.data()));
  return out;
}

template <class T>
void dump(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

class MxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(hp_binary())) << hp_binary() << " missing: build target hp_cli";
    dir_ = fs::temp_directory_path() / ("hp_mx_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    x_.resize(size_t(kR * kC));
    for (auto& v : x_) v = nd(rng);
    dump(dir_ / "x.f32", x_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static constexpr int64_t kR = 45, kC = 70;
  fs::path dir_;
  std::vector<float> x_;
};

TEST_F(MxCli, QuantizeDequantizeMatchLibrary) {
  for (const bool col : {false, true}) {
    const std::string axis = col ? "col" : "row";
    const QuantSpec spec{ElemFormat::e5m2, ScaleMode::floor};
    Result r = run_hp("mx quantize --in " + path("x.f32") + " --shape 45,70 --axis " + axis +
                      " --elem e5m2 --scale-mode floor --out " + path("q"));
    ASSERT_EQ(r.code, 0) << r.output;
    const int64_t ns = col ? (kR + 31) / 32 * kC : kR * ((kC + 31) / 32);
    std::vector<uint8_t> codes(size_t(kR * kC)), scales(static_cast<size_t>(ns));
    std::vector<float> y(size_t(kR * kC));
    if (col) {
      quantize_colwise(x_.data(), DType::f32, kR, kC, spec, codes.data(), scales.data());
      dequantize_colwise(codes.data(), scales.data(), kR, kC, spec.elem, y.data(), DType::f32);
    } else {
      quantize_rowwise(x_.data(), DType::f32, kR, kC, spec, codes.data(), scales.data());
      dequantize_rowwise(codes.data(), scales.data(), kR, kC, spec.elem, y.data(), DType::f32);
    }
    EXPECT_EQ(slurp<uint8_t>(path("q.codes")), codes) << axis;
    EXPECT_EQ(slurp<uint8_t>(path("q.scales")), scales) << axis;
    r = run_hp("mx dequantize --codes " + path("q.codes") + " --scales " + path("q.scales") +
               " --shape 45,70 --axis " + axis + " --elem e5m2 --out " + path("y.f32"));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(slurp<float>(path("y.f32")), y) << axis;
  }
}

TEST_F(MxCli, StatsReportsRoundTripError) {
  Result r = run_hp("mx stats --in " + path("x.f32") + " --shape 45,70");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* key : {"max_abs_err", "max_rel_err", "snr_db", "saturated 0"})
    EXPECT_NE(r.output.find(key), std::string::npos) << key << " in " << r.output;
  // floor mode saturates the block maxima that round above 448·scale; rceil never does.
  r = run_hp("mx stats --in " + path("x.f32") + " --shape 45,70 --axis col --scale-mode floor");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("snr_db"), std::string::npos);
}

TEST_F(MxCli, BadInputExitsTwoNamingTheCulprit) {
  struct Case {
    std::string args, needle;
  };
  const std::string x = path("x.f32");
  const std::vector<Case> cases = {
      {"mx quantize --in " + x + " --shape 45,71 --axis row --out " + path("q"), x},
      {"mx quantize --in " + x + " --shape 45,70 --axis diag --out " + path("q"), "diag"},
      {"mx quantize --in " + x + " --shape 45,70 --axis row", "--out"},
      {"mx quantize --in " + path("nope.f32") + " --shape 45,70 --axis row --out q", "nope.f32"},
      {"mx quantize --in " + x + " --shape 45x70 --axis row --out q", "45x70"},
      {"mx quantize --in " + x + " --shape 45,70 --axis row --scale-mode up --out q", "up"},
      {"mx stats --in " + x + " --shape 45,70 --elem e3m4", "e3m4"},
      {"mx dequantize --codes " + x + " --scales " + x + " --shape 45,70 --axis row --out " +
           path("y"),
       "--codes"},
      {"mx frobnicate", "frobnicate"},
  };
  for (const Case& c : cases) {
    const Result r = run_hp(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

}  // namespace
}  // namespace hp::mx
