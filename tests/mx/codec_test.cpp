// Element and scale codecs (format.h) against the core FP8 conversions (ml_dtypes semantics) and
// the rules of docs/ARCHITECTURE.md §4.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "hp/core/dtype.h"
#include "hp/mx/format.h"

namespace hp::mx {
namespace {

constexpr ElemFormat kFormats[] = {ElemFormat::e4m3, ElemFormat::e5m2};

Fp8Kind kind_of(ElemFormat f) {
  return f == ElemFormat::e4m3 ? Fp8Kind::e4m3 : Fp8Kind::e5m2;
}

TEST(MxCodec, FormatTable) {
  const FormatInfo& a = format_info(ElemFormat::e4m3);
  EXPECT_EQ(a.bias, 7);
  EXPECT_EQ(a.emax, 8);
  EXPECT_EQ(a.max_normal, 448.0f);
  EXPECT_EQ(decode_elem(a.max_code, ElemFormat::e4m3), 448.0f);
  EXPECT_EQ(decode_elem(0x08, ElemFormat::e4m3), a.min_normal);
  EXPECT_EQ(decode_elem(0x01, ElemFormat::e4m3), a.min_subnormal);
  const FormatInfo& b = format_info(ElemFormat::e5m2);
  EXPECT_EQ(b.bias, 15);
  EXPECT_EQ(b.emax, 15);
  EXPECT_EQ(decode_elem(b.max_code, ElemFormat::e5m2), 57344.0f);
  EXPECT_EQ(decode_elem(0x04, ElemFormat::e5m2), b.min_normal);
  EXPECT_EQ(decode_elem(0x01, ElemFormat::e5m2), b.min_subnormal);
}

TEST(MxCodec, AllCodesDecodeEncodeRoundTrip) {
  for (ElemFormat f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float v = decode_elem(code, f);
      const float core = fp8_to_f32(code, kind_of(f));
      if (std::isnan(core)) {
        EXPECT_TRUE(std::isnan(v)) << c;
        EXPECT_EQ(encode_elem(v, f), kElemNaN) << c;  // NaN encodes to the canonical 0x7F
        continue;
      }
      EXPECT_EQ(v, core) << c;
      EXPECT_EQ(std::signbit(v), std::signbit(core)) << c;
      if (std::isinf(v)) {  // E5M2 ±Inf: the MX encoder saturates
        EXPECT_EQ(encode_elem(v, f), (code & 0x80) | format_info(f).max_code) << c;
        continue;
      }
      EXPECT_EQ(encode_elem(v, f), code) << "format " << elem_format_name(f) << " code " << c;
    }
  }
}

TEST(MxCodec, EncodeEveryBf16PatternMatchesSaturatingCast) {
  for (ElemFormat f : kFormats) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const float v = bf16_to_f32(static_cast<uint16_t>(b));
      const uint8_t got = encode_elem(v, f);
      if (std::isnan(v)) {
        ASSERT_EQ(got, kElemNaN) << b;
        continue;
      }
      ASSERT_EQ(got, f32_to_fp8(v, kind_of(f), /*saturate=*/true))
          << elem_format_name(f) << " bf16 pattern " << b;
    }
  }
}

TEST(MxCodec, TiesRoundToEven) {
  const auto e4 = ElemFormat::e4m3;
  EXPECT_EQ(encode_elem(1.0625f, e4), 0x38);        // halfway 1 and 1.125 → 1 (even)
  EXPECT_EQ(encode_elem(1.1875f, e4), 0x3A);        // halfway 1.125 and 1.25 → 1.25
  EXPECT_EQ(encode_elem(0x1p-10f, e4), 0x00);       // halfway 0 and 2^-9 → 0
  EXPECT_EQ(encode_elem(3 * 0x1p-10f, e4), 0x02);   // halfway 1 and 2 quanta → 2
  EXPECT_EQ(encode_elem(15 * 0x1p-10f, e4), 0x08);  // rounds up into the smallest normal
  EXPECT_EQ(encode_elem(-0x1p-10f, e4), 0x80);      // −0 keeps its sign
  EXPECT_EQ(encode_elem(464.0f, e4), 0x7E);         // tie past max normal saturates
  EXPECT_EQ(encode_elem(1e30f, e4), 0x7E);
  EXPECT_EQ(encode_elem(-INFINITY, e4), 0xFE);
  const auto e5 = ElemFormat::e5m2;
  EXPECT_EQ(encode_elem(1.125f, e5), 0x3C);        // halfway 1 and 1.25 → 1
  EXPECT_EQ(encode_elem(1.375f, e5), 0x3E);        // halfway 1.25 and 1.5 → 1.5
  EXPECT_EQ(encode_elem(0x1p-17f, e5), 0x00);      // halfway 0 and 2^-16
  EXPECT_EQ(encode_elem(3 * 0x1p-17f, e5), 0x02);  // 1.5 quanta → 2
  EXPECT_EQ(encode_elem(61440.0f, e5), 0x7B);      // halfway 57344 and 65536 saturates
  EXPECT_EQ(encode_elem(INFINITY, e5), 0x7B);
}

TEST(MxCodec, ScaleExponentRules) {
  const auto e4 = ElemFormat::e4m3, e5 = ElemFormat::e5m2;
  const auto fl = ScaleMode::floor, rc = ScaleMode::rceil;
  // amax at a power of two: floor = log2 amax - emax; rceil = ceil(log2(amax / 448)).
  EXPECT_EQ(scale_exponent(256.0f, e4, fl), 0);
  EXPECT_EQ(scale_exponent(256.0f, e4, rc), 0);
  EXPECT_EQ(scale_exponent(512.0f, e4, rc), 1);
  EXPECT_EQ(scale_exponent(1.0f, e5, fl), -15);
  // The rceil step sits at a significand of 1.75 (the max normal's).
  EXPECT_EQ(scale_exponent(448.0f, e4, rc), 0);
  EXPECT_EQ(scale_exponent(std::nextafter(448.0f, 1e9f), e4, rc), 1);
  EXPECT_EQ(scale_exponent(std::nextafter(448.0f, 1e9f), e4, fl), 0);
  EXPECT_EQ(scale_exponent(57344.0f * 1024, e5, rc), 10);
  EXPECT_EQ(scale_exponent(std::nextafter(57344.0f * 1024, 1e30f), e5, rc), 11);
  // Clamping and the ends of the E8M0 range.
  EXPECT_EQ(scale_exponent(0.0f, e4, fl), -127);
  EXPECT_EQ(scale_exponent(0x1p-149f, e4, rc), -127);  // f32 denormal amax
  EXPECT_EQ(scale_exponent(0x1p-118f, e4, fl), -126);
  EXPECT_EQ(scale_exponent(FLT_MAX, e4, fl), 119);
  EXPECT_EQ(scale_exponent(FLT_MAX, e4, rc), 120);
  EXPECT_EQ(scale_byte(0.0f, e4, rc), 0);
  EXPECT_EQ(scale_byte(NAN, e4, rc), kScaleNaN);
  EXPECT_EQ(scale_byte(INFINITY, e5, fl), kScaleNaN);
  EXPECT_EQ(scale_to_f32(0), 0x1p-127f);
  EXPECT_EQ(scale_to_f32(127), 1.0f);
  EXPECT_EQ(scale_to_f32(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(scale_to_f32(255)));
}

TEST(MxCodec, ReferenceBlockSpecialCases) {
  uint8_t codes[32];
  float x[32] = {};
  x[3] = -0.0f;
  EXPECT_EQ(detail::quantize_block_ref(x, 32, 1, {}, codes, 1), 0);  // all zero → scale byte 0
  EXPECT_EQ(codes[0], 0x00);
  EXPECT_EQ(codes[3], 0x80);  // −0 stays 0x80
  x[7] = NAN;
  EXPECT_EQ(detail::quantize_block_ref(x, 32, 1, {}, codes, 1), kScaleNaN);
  for (uint8_t c : codes) EXPECT_EQ(c, kElemNaN);
  x[7] = -INFINITY;
  EXPECT_EQ(detail::quantize_block_ref(x, 32, 1, {ElemFormat::e5m2, ScaleMode::floor}, codes, 1),
            kScaleNaN);
  for (uint8_t c : codes) EXPECT_EQ(c, kElemNaN);
  // floor saturates, rceil does not.
  float y[32] = {500.0f, 1.0f};
  detail::quantize_block_ref(y, 32, 1, {ElemFormat::e4m3, ScaleMode::floor}, codes, 1);
  EXPECT_EQ(codes[0], 0x7E);
  EXPECT_EQ(detail::quantize_block_ref(y, 32, 1, {ElemFormat::e4m3, ScaleMode::rceil}, codes, 1),
            128);
  EXPECT_EQ(codes[0], encode_elem(250.0f, ElemFormat::e4m3));
}

}  // namespace
}  // namespace hp::mx
