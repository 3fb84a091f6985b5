// hp mx quantize | dequantize | stats: MXFP8 round trips on raw little-endian float32 files.
//
//   quantize    --in X.f32 --shape R,C --axis row|col [--elem e4m3|e5m2] [--scale-mode floor|rceil]
//               --out PREFIX        writes PREFIX.codes (R·C bytes, the input's element order) and
//                                   PREFIX.scales (row: R·ceil(C/32) bytes, col: ceil(R/32)·C
//                                   bytes)
//   dequantize  --codes F --scales F --shape R,C --axis row|col [--elem e4m3|e5m2] --out Y.f32
//   stats       --in X.f32 --shape R,C [--axis row] [--elem e4m3] [--scale-mode rceil]
//               prints max abs error, max relative error, SNR (dB) and the saturated count
// Defaults are the recipe of docs/ARCHITECTURE.md §4 (E4M3, rceil); --axis defaults to row for
// stats only.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "commands.h"
#include "hp/mx/quantize.h"

namespace hp::cli {
namespace {

using mx::ElemFormat;
using mx::QuantSpec;
using mx::ScaleMode;

std::string need(Args& args, const std::string& flag) {
  std::string v;
  if (!take_value(args, flag, &v)) throw UsageError{"missing " + flag};
  return v;
}

std::vector<char> read_file(const std::string& flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError{flag + ": cannot read '" + path + "'"};
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) throw UsageError{"cannot write '" + path + "'"};
}

struct Shape2 {
  int64_t rows, cols;
};

Shape2 parse_shape(const std::string& v) {
  const size_t comma = v.find(',');
  if (comma == std::string::npos) throw UsageError{"--shape expects R,C, got '" + v + "'"};
  const long long big = 1LL << 40;
  return {parse_int("--shape", v.substr(0, comma), 1, big),
          parse_int("--shape", v.substr(comma + 1), 1, big)};
}

bool parse_axis_col(const std::string& v) {
  if (v == "row") return false;
  if (v == "col") return true;
  throw UsageError{"--axis must be row or col, got '" + v + "'"};
}

ElemFormat parse_elem(Args& args) {
  std::string v = "e4m3";
  take_value(args, "--elem", &v);
  if (v == "e4m3") return ElemFormat::e4m3;
  if (v == "e5m2") return ElemFormat::e5m2;
  throw UsageError{"--elem must be e4m3 or e5m2, got '" + v + "'"};
}

ScaleMode parse_mode(Args& args) {
  std::string v = "rceil";
  take_value(args, "--scale-mode", &v);
  if (v == "rceil") return ScaleMode::rceil;
  if (v == "floor") return ScaleMode::floor;
  throw UsageError{"--scale-mode must be floor or rceil, got '" + v + "'"};
}

int64_t scale_count(Shape2 s, bool col) {
  return col ? (s.rows + 31) / 32 * s.cols : s.rows * ((s.cols + 31) / 32);
}

void check_size(const std::string& flag, const std::string& path, size_t got, int64_t want,
                Shape2 s) {
  if (static_cast<int64_t>(got) != want)
    throw UsageError{flag + " '" + path + "' holds " + std::to_string(got) + " bytes, expected " +
                     std::to_string(want) + " for --shape " + std::to_string(s.rows) + "," +
                     std::to_string(s.cols)};
}

// x [R, C] f32 from --in.
std::vector<float> read_input(const std::string& path, Shape2 s) {
  const std::vector<char> raw = read_file("--in", path);
  check_size("--in", path, raw.size(), s.rows * s.cols * 4, s);
  std::vector<float> x(raw.size() / 4);
  std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(x.data()));
  return x;
}

struct Round {
  std::vector<uint8_t> codes, scales;
};

Round quantize(const std::vector<float>& x, Shape2 s, bool col, QuantSpec spec) {
  Round q{std::vector<uint8_t>(x.size()), std::vector<uint8_t>(size_t(scale_count(s, col)))};
  if (col)
    mx::quantize_colwise(x.data(), DType::f32, s.rows, s.cols, spec, q.codes.data(),
                         q.scales.data());
  else
    mx::quantize_rowwise(x.data(), DType::f32, s.rows, s.cols, spec, q.codes.data(),
                         q.scales.data());
  return q;
}

std::vector<float> dequantize(const Round& q, Shape2 s, bool col, ElemFormat elem) {
  std::vector<float> y(q.codes.size());
  if (col)
    mx::dequantize_colwise(q.codes.data(), q.scales.data(), s.rows, s.cols, elem, y.data(),
                           DType::f32);
  else
    mx::dequantize_rowwise(q.codes.data(), q.scales.data(), s.rows, s.cols, elem, y.data(),
                           DType::f32);
  return y;
}

int run_quantize(Args args) {
  const std::string in = need(args, "--in"), out = need(args, "--out");
  const Shape2 s = parse_shape(need(args, "--shape"));
  const bool col = parse_axis_col(need(args, "--axis"));
  const QuantSpec spec{parse_elem(args), parse_mode(args)};
  reject_leftovers(args);
  const Round q = quantize(read_input(in, s), s, col, spec);
  write_file(out + ".codes", q.codes.data(), q.codes.size());
  write_file(out + ".scales", q.scales.data(), q.scales.size());
  return 0;
}

int run_dequantize(Args args) {
  const std::string codes = need(args, "--codes"), scales = need(args, "--scales"),
                    out = need(args, "--out");
  const Shape2 s = parse_shape(need(args, "--shape"));
  const bool col = parse_axis_col(need(args, "--axis"));
  const ElemFormat elem = parse_elem(args);
  reject_leftovers(args);
  const std::vector<char> c = read_file("--codes", codes), sc = read_file("--scales", scales);
  check_size("--codes", codes, c.size(), s.rows * s.cols, s);
  check_size("--scales", scales, sc.size(), scale_count(s, col), s);
  const Round q{std::vector<uint8_t>(c.begin(), c.end()),
                std::vector<uint8_t>(sc.begin(), sc.end())};
  const std::vector<float> y = dequantize(q, s, col, elem);
  write_file(out, y.data(), y.size() * sizeof(float));
  return 0;
}

int run_stats(Args args) {
  const std::string in = need(args, "--in");
  const Shape2 s = parse_shape(need(args, "--shape"));
  std::string axis = "row";
  take_value(args, "--axis", &axis);
  const bool col = parse_axis_col(axis);
  const QuantSpec spec{parse_elem(args), parse_mode(args)};
  reject_leftovers(args);
  const std::vector<float> x = read_input(in, s);
  const Round q = quantize(x, s, col, spec);
  const std::vector<float> y = dequantize(q, s, col, spec.elem);
  const float max_normal = mx::format_info(spec.elem).max_normal;
  double max_abs = 0, max_rel = 0, sig = 0, noise = 0;
  int64_t saturated = 0, nonfinite = 0;
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) {
      const size_t i = size_t(r * s.cols + c);
      if (!std::isfinite(x[i])) {
        ++nonfinite;
        continue;
      }
      const size_t si =
          col ? size_t(r / 32 * s.cols + c) : size_t(r * ((s.cols + 31) / 32) + c / 32);
      const double scale = mx::scale_to_f32(q.scales[si]);
      const double err = std::fabs(double(y[i]) - double(x[i]));
      if (!std::isfinite(scale)) continue;  // a block holding NaN/Inf elsewhere
      max_abs = std::max(max_abs, err);
      if (x[i] != 0.0f) max_rel = std::max(max_rel, err / std::fabs(double(x[i])));
      sig += double(x[i]) * double(x[i]);
      noise += err * err;
      if (std::fabs(double(x[i])) / scale > max_normal) ++saturated;
    }
  const double snr = noise == 0 ? INFINITY : 10.0 * std::log10(sig / noise);
  std::printf("shape %lld,%lld axis %s elem %s scale_mode %s\n", (long long)s.rows,
              (long long)s.cols, col ? "col" : "row",
              std::string(mx::elem_format_name(spec.elem)).c_str(),
              std::string(mx::scale_mode_name(spec.scale_mode)).c_str());
  std::printf("max_abs_err %.6g\nmax_rel_err %.6g\nsnr_db %.3f\nsaturated %lld\nnonfinite %lld\n",
              max_abs, max_rel, snr, (long long)saturated, (long long)nonfinite);
  return 0;
}

}  // namespace

int run_mx(const Args& in) {
  if (in.empty()) throw UsageError{"expected a subcommand: quantize, dequantize or stats"};
  const std::string sub = in.front();
  const Args rest(in.begin() + 1, in.end());
  reject_unknown_flags(rest, {"--in", "--out", "--shape", "--axis", "--elem", "--scale-mode",
                              "--codes", "--scales"});
  if (sub == "quantize") return run_quantize(rest);
  if (sub == "dequantize") return run_dequantize(rest);
  if (sub == "stats") return run_stats(rest);
  throw UsageError{"unknown subcommand '" + sub + "' (quantize, dequantize, stats)"};
}

}  // namespace hp::cli
