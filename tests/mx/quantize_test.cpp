// SIMD and threaded quantize / dequantize kernels against the scalar reference, bit for bit, on
// every ISA the CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/mx/driver.h"
#include "isa_test.h"
#include "mx/mx_ref.h"

namespace hp::mx {
namespace {

using test::Quantized;

constexpr QuantSpec kSpecs[] = {{ElemFormat::e4m3, ScaleMode::floor},
                                {ElemFormat::e4m3, ScaleMode::rceil},
                                {ElemFormat::e5m2, ScaleMode::floor},
                                {ElemFormat::e5m2, ScaleMode::rceil}};

// The quantizer and dequantizer tests run once per ISA (tests/isa_test.h).
class MxQuantizeIsa : public ::hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(MxQuantizeIsa);

std::string label(const std::string& isa, QuantSpec s, DType dt, int64_t rows, int64_t cols) {
  return isa + " " + std::string(elem_format_name(s.elem)) + " " +
         std::string(scale_mode_name(s.scale_mode)) + " " + std::string(dtype_name(dt)) + " [" +
         std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

// Runs row-wise, column-wise and dual on x (given as f32; bf16 input uses its bf16 rounding) and
// checks all against the reference.
void check_all_axes(const std::vector<float>& x32, int64_t rows, int64_t cols, DType dt,
                    QuantSpec spec, const std::string& what) {
  const std::vector<uint16_t> x16 = test::to_bf16(x32);
  const std::vector<float> xv = dt == DType::bf16 ? test::from_bf16(x16) : x32;
  const void* x = dt == DType::bf16 ? static_cast<const void*>(x16.data()) : x32.data();
  const Quantized want_row = test::ref_rowwise(xv, rows, cols, spec);
  const Quantized want_col = test::ref_colwise(xv, rows, cols, spec);
  Quantized row{std::vector<uint8_t>(want_row.codes.size(), 0xAA),
                std::vector<uint8_t>(want_row.scales.size(), 0xAA)};
  Quantized col{std::vector<uint8_t>(want_col.codes.size(), 0xAA),
                std::vector<uint8_t>(want_col.scales.size(), 0xAA)};
  quantize_rowwise(x, dt, rows, cols, spec, row.codes.data(), row.scales.data());
  ASSERT_TRUE(row == want_row) << "row-wise " << what;
  quantize_colwise(x, dt, rows, cols, spec, col.codes.data(), col.scales.data());
  ASSERT_TRUE(col == want_col) << "column-wise " << what;
  Quantized drow = row, dcol = col;
  std::fill(drow.codes.begin(), drow.codes.end(), 0xAA);
  std::fill(dcol.codes.begin(), dcol.codes.end(), 0xAA);
  quantize_dual(x, dt, rows, cols, spec, drow.codes.data(), drow.scales.data(), dcol.codes.data(),
                dcol.scales.data());
  ASSERT_TRUE(drow == want_row) << "dual (row) " << what;
  ASSERT_TRUE(dcol == want_col) << "dual (column) " << what;
}

TEST_P(MxQuantizeIsa, EveryBf16PatternAllSpecs) {
  const std::string isa = isa_label();
  std::vector<float> natural(65536);
  for (uint32_t b = 0; b < 65536; ++b) natural[b] = bf16_to_f32(static_cast<uint16_t>(b));
  // Shuffled, and shuffled without NaN/Inf so no block is wiped by the NaN rule.
  std::vector<float> shuffled = natural, finite;
  std::mt19937 gen(7);
  std::shuffle(shuffled.begin(), shuffled.end(), gen);
  for (float v : shuffled)
    if (std::isfinite(v)) finite.push_back(v);
  finite.resize(finite.size() / 32 * 32);
  {
    for (QuantSpec spec : kSpecs)
      for (DType dt : {DType::f32, DType::bf16}) {
        check_all_axes(natural, 2048, 32, dt, spec, label(isa, spec, dt, 2048, 32));
        check_all_axes(natural, 32, 2048, dt, spec, label(isa, spec, dt, 32, 2048));
        check_all_axes(shuffled, 256, 256, dt, spec, label(isa, spec, dt, 256, 256));
        const int64_t n = static_cast<int64_t>(finite.size());
        check_all_axes(finite, n / 64, 64, dt, spec, label(isa, spec, dt, n / 64, 64));
      }
  }
}

void run_shapes_test(const std::string& isa) {
  const int64_t shapes[][2] = {{0, 0},     {0, 5},     {5, 0},   {1, 1},   {1, 31},
                               {3, 33},    {31, 32},   {32, 32}, {33, 65}, {64, 300},
                               {100, 257}, {257, 100}, {70, 40}};
  uint32_t seed = 1;
  {
    for (const auto& s : shapes) {
      const std::vector<float> x = test::special_matrix(s[0], s[1], seed++);
      for (QuantSpec spec : kSpecs)
        for (DType dt : {DType::f32, DType::bf16})
          check_all_axes(x, s[0], s[1], dt, spec, label(isa, spec, dt, s[0], s[1]));
    }
  }
}

TEST_P(MxQuantizeIsa, ShapesWithPartialBlocksAndSpecialValues) {
  run_shapes_test(isa_label());
}

// Non-temporal code stores (used for large outputs) must write the same bytes.
TEST_P(MxQuantizeIsa, StreamingStoresGiveSameBytes) {
  detail::set_stream_bytes(0);
  run_shapes_test(isa_label());
  detail::set_stream_bytes(int64_t(16) << 20);
}

// Runs every quantizer on one input and returns all outputs concatenated.
std::vector<uint8_t> all_outputs(const std::vector<float>& x, int64_t rows, int64_t cols,
                                 const std::vector<int32_t>& ends) {
  const int64_t nbc = (cols + 31) / 32,
                srows = grouped_colwise_scale_rows(ends.data(), ends.size(), rows);
  std::vector<uint8_t> rc(rows * cols), rs(rows * nbc), cc(rows * cols),
      cs((rows + 31) / 32 * cols);
  std::vector<uint8_t> dc(rows * cols), ds(rows * nbc), ec(rows * cols), es(cs.size());
  std::vector<uint8_t> gc(rows * cols), gs(srows * cols);
  quantize_rowwise(x.data(), DType::f32, rows, cols, {}, rc.data(), rs.data());
  quantize_colwise(x.data(), DType::f32, rows, cols, {}, cc.data(), cs.data());
  quantize_dual(x.data(), DType::f32, rows, cols, {}, dc.data(), ds.data(), ec.data(), es.data());
  quantize_grouped_colwise(x.data(), DType::f32, rows, cols, ends.data(), ends.size(), {},
                           gc.data(), gs.data());
  std::vector<uint8_t> out;
  for (const auto* v : {&rc, &rs, &cc, &cs, &dc, &ds, &ec, &es, &gc, &gs})
    out.insert(out.end(), v->begin(), v->end());
  return out;
}

TEST(MxQuantize, BitwiseIdenticalForAnyThreadCount) {
  const int64_t rows = 515, cols = 1100;
  const std::vector<float> x = test::special_matrix(rows, cols, 99);
  const std::vector<int32_t> ends = {0, 33, 33, 200, 231, 515};
  const int saved = num_threads();
  set_num_threads(1);
  const std::vector<uint8_t> one = all_outputs(x, rows, cols, ends);
  for (int t : {2, 3, 5}) {
    set_num_threads(t);
    EXPECT_TRUE(all_outputs(x, rows, cols, ends) == one) << t << " threads";
  }
  set_num_threads(saved);
}

TEST_P(MxQuantizeIsa, GroupedBlocksNeverCrossGroups) {
  const std::string isa = isa_label();
  const std::vector<std::vector<int32_t>> cases = {
      {}, {0}, {40}, {0, 0, 17}, {1, 33, 65, 65, 129, 130}, {31, 63, 95, 127}, {100, 164, 200}};
  uint32_t seed = 11;
  {
    for (const auto& ends : cases) {
      const int64_t used = ends.empty() ? 0 : ends.back();
      const int64_t rows = used + 5, cols = 45, nbc = 2;  // rows past the last group stay untouched
      const std::vector<float> x = test::special_matrix(rows, cols, seed++);
      for (QuantSpec spec : kSpecs) {
        const std::vector<int64_t> ends64(ends.begin(), ends.end());
        const Quantized want_col =
            test::ref_colwise_groups(x, cols, ends64, spec, std::vector<uint8_t>(x.size(), 0xAA));
        const int64_t srows = grouped_colwise_scale_rows(ends.data(), ends.size(), rows);
        ASSERT_EQ(srows * cols, static_cast<int64_t>(want_col.scales.size()));
        Quantized col{std::vector<uint8_t>(x.size(), 0xAA), std::vector<uint8_t>(srows * cols)};
        quantize_grouped_colwise(x.data(), DType::f32, rows, cols, ends.data(), ends.size(), spec,
                                 col.codes.data(), col.scales.data());
        ASSERT_TRUE(col == want_col) << isa << " grouped column-wise, groups " << ends.size();

        Quantized want_row = test::ref_rowwise(x, rows, cols, spec);
        std::fill(want_row.codes.begin() + used * cols, want_row.codes.end(), 0xAA);
        std::fill(want_row.scales.begin() + used * nbc, want_row.scales.end(), 0xAA);
        Quantized row{std::vector<uint8_t>(x.size(), 0xAA), std::vector<uint8_t>(rows * nbc, 0xAA)};
        quantize_grouped_rowwise(x.data(), DType::f32, rows, cols, ends.data(), ends.size(), spec,
                                 row.codes.data(), row.scales.data());
        ASSERT_TRUE(row == want_row) << isa << " grouped row-wise";

        Quantized drow{std::vector<uint8_t>(x.size(), 0xAA),
                       std::vector<uint8_t>(rows * nbc, 0xAA)};
        Quantized dcol{std::vector<uint8_t>(x.size(), 0xAA), std::vector<uint8_t>(srows * cols)};
        quantize_grouped_dual(x.data(), DType::f32, rows, cols, ends.data(), ends.size(), spec,
                              drow.codes.data(), drow.scales.data(), dcol.codes.data(),
                              dcol.scales.data());
        ASSERT_TRUE(drow == want_row) << isa << " grouped dual (row)";
        ASSERT_TRUE(dcol == want_col) << isa << " grouped dual (column)";
      }
    }
  }
}

bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

TEST_P(MxQuantizeIsa, DequantizeEveryCodeAndScaleAgainstScalarDecode) {
  const std::string isa = isa_label();
  // codes cycle through all 256 values; scales through all 256 bytes.
  const int64_t rows = 67, cols = 300, nbc = 10;
  std::vector<uint8_t> codes(rows * cols), rscales(rows * nbc), cscales(3 * cols);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 + i / 256);
  for (size_t i = 0; i < rscales.size(); ++i) rscales[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < cscales.size(); ++i) cscales[i] = static_cast<uint8_t>(i * 3);
  {
    for (ElemFormat f : {ElemFormat::e4m3, ElemFormat::e5m2}) {
      std::vector<float> out(rows * cols);
      std::vector<uint16_t> out16(rows * cols);
      for (int axis = 0; axis < 2; ++axis) {
        if (axis == 0) {
          dequantize_rowwise(codes.data(), rscales.data(), rows, cols, f, out.data(), DType::f32);
          dequantize_rowwise(codes.data(), rscales.data(), rows, cols, f, out16.data(),
                             DType::bf16);
        } else {
          dequantize_colwise(codes.data(), cscales.data(), rows, cols, f, out.data(), DType::f32);
          dequantize_colwise(codes.data(), cscales.data(), rows, cols, f, out16.data(),
                             DType::bf16);
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const uint8_t s = axis == 0 ? rscales[r * nbc + c / 32] : cscales[(r / 32) * cols + c];
            const float want = decode_elem(codes[r * cols + c], f) * scale_to_f32(s);
            ASSERT_TRUE(same_value(out[r * cols + c], want))
                << isa << " axis " << axis << " at " << r << "," << c;
            // NaN payloads are not part of the contract; every other bf16 bit is.
            ASSERT_TRUE(
                same_value(bf16_to_f32(out16[r * cols + c]), bf16_to_f32(f32_to_bf16(want))))
                << isa << " bf16 at " << r << "," << c;
          }
      }
    }
  }
}

TEST(MxDequantize, RoundTripGroupedColwise) {
  const std::vector<int32_t> ends = {3, 3, 40, 75};
  const int64_t rows = 80, cols = 37;
  const std::vector<float> x = test::special_matrix(rows, cols, 5, 0.0);
  const int64_t srows = grouped_colwise_scale_rows(ends.data(), ends.size(), rows);
  EXPECT_EQ(srows, 1 + 0 + 2 + 2);
  std::vector<uint8_t> codes(rows * cols), scales(srows * cols);
  quantize_grouped_colwise(x.data(), DType::f32, rows, cols, ends.data(), ends.size(), {},
                           codes.data(), scales.data());
  std::vector<float> out(rows * cols, -1.0f);
  dequantize_grouped_colwise(codes.data(), scales.data(), rows, cols, ends.data(), ends.size(),
                             ElemFormat::e4m3, out.data(), DType::f32);
  const Quantized q = test::ref_colwise_groups(x, cols, {3, 3, 40, 75}, {});
  int64_t start = 0, srow = 0;
  for (int32_t end : ends) {
    for (int64_t r = start; r < end; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float want = decode_elem(q.codes[r * cols + c], ElemFormat::e4m3) *
                           scale_to_f32(q.scales[(srow + (r - start) / 32) * cols + c]);
        ASSERT_TRUE(same_value(out[r * cols + c], want)) << r << "," << c;
      }
    srow += (end - start + 31) / 32;
    start = end;
  }
  for (int64_t i = 75 * cols; i < rows * cols; ++i) ASSERT_EQ(out[i], -1.0f);
}

template <class Fn>
void expect_value_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no ValueError; expected one mentioning '" << needle << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[mx]", 0), 0u) << e.what();
  }
}

TEST(MxQuantize, BadArgumentsThrowValueError) {
  std::vector<float> x(64 * 64, 1.0f);
  std::vector<uint8_t> c(64 * 64), s(64 * 64);
  expect_value_error([&] { quantize_rowwise(x.data(), DType::f32, -1, 4, {}, c.data(), s.data()); },
                     "[-1, 4]");
  expect_value_error([&] { quantize_colwise(nullptr, DType::f32, 2, 4, {}, c.data(), s.data()); },
                     "x is null");
  expect_value_error(
      [&] { quantize_dual(x.data(), DType::f32, 2, 4, {}, c.data(), s.data(), nullptr, s.data()); },
      "column codes is null");
  expect_value_error([&] { quantize_rowwise(x.data(), DType::i32, 2, 4, {}, c.data(), s.data()); },
                     "got i32");
  expect_value_error(
      [&] {
        quantize_rowwise(x.data(), DType::f32, int64_t(1) << 40, int64_t(1) << 40, {}, c.data(),
                         s.data());
      },
      "too large");
  const int32_t decreasing[] = {10, 5};
  expect_value_error(
      [&] {
        quantize_grouped_colwise(x.data(), DType::f32, 64, 64, decreasing, 2, {}, c.data(),
                                 s.data());
      },
      "group_ends[1] = 5 < 10");
  const int32_t negative[] = {-3};
  expect_value_error(
      [&] {
        quantize_grouped_rowwise(x.data(), DType::f32, 64, 64, negative, 1, {}, c.data(), s.data());
      },
      "group_ends[0] = -3 < 0");
  const int32_t beyond[] = {10, 65};
  expect_value_error(
      [&] {
        quantize_grouped_dual(x.data(), DType::f32, 64, 64, beyond, 2, {}, c.data(), s.data(),
                              c.data(), s.data());
      },
      "group_ends[1] = 65 is beyond rows = 64");
  expect_value_error(
      [&] {
        quantize_grouped_colwise(x.data(), DType::f32, 64, 64, nullptr, 2, {}, c.data(), s.data());
      },
      "group_ends is null");
  expect_value_error(
      [&] { dequantize_rowwise(c.data(), nullptr, 2, 4, ElemFormat::e4m3, x.data(), DType::f32); },
      "scales is null");
  expect_value_error(
      [&] { dequantize_colwise(c.data(), s.data(), 2, 4, ElemFormat::e4m3, x.data(), DType::f16); },
      "got f16");
  // Empty inputs accept null pointers.
  quantize_rowwise(nullptr, DType::f32, 0, 5, {}, nullptr, nullptr);
  quantize_dual(nullptr, DType::bf16, 7, 0, {}, nullptr, nullptr, nullptr, nullptr);
  quantize_grouped_colwise(nullptr, DType::f32, 0, 3, nullptr, 0, {}, nullptr, nullptr);
}

}  // namespace
}  // namespace hp::mx
