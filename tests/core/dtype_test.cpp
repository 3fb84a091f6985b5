#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "hp/core/dtype.h"

namespace hp {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DType, Bf16RoundTripAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), b) << "pattern " << b;
  }
}

TEST(DType, F16RoundTripAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = f16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), b) << "pattern " << b;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to the even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
}

TEST(DType, F16HalfwayCasesAgainstDoubleReference) {
  // Every f32 that is exactly halfway between two adjacent f16 values must round to the even one.
  for (uint32_t b = 0; b < 0x7BFF; ++b) {
    double lo = f16_to_f32(static_cast<uint16_t>(b)), hi = f16_to_f32(static_cast<uint16_t>(b + 1));
    float mid = static_cast<float>((lo + hi) / 2);
    uint16_t want = (b & 1) ? static_cast<uint16_t>(b + 1) : static_cast<uint16_t>(b);
    ASSERT_EQ(f32_to_f16(mid), want) << "between " << lo << " and " << hi;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // rounds past max normal → Inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
}

TEST(DType, Fp8DecodeEncodeAllCodes) {
  for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2}) {
    for (uint32_t c = 0; c < 256; ++c) {
      float f = fp8_to_f32(static_cast<uint8_t>(c), k);
      if (std::isnan(f)) continue;
      EXPECT_EQ(f32_to_fp8(f, k), c) << "code " << c;
    }
  }
  EXPECT_EQ(fp8_to_f32(0x7E, Fp8Kind::e4m3), 448.0f);
  EXPECT_TRUE(std::isnan(fp8_to_f32(0x7F, Fp8Kind::e4m3)));
  EXPECT_EQ(fp8_to_f32(0x01, Fp8Kind::e4m3), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_to_f32(0x7B, Fp8Kind::e5m2), 57344.0f);
  EXPECT_TRUE(std::isinf(fp8_to_f32(0x7C, Fp8Kind::e5m2)));
  EXPECT_EQ(fp8_to_f32(0x01, Fp8Kind::e5m2), std::ldexp(1.0f, -16));
  // Overflow: e4m3 → NaN unless saturating; e5m2 → Inf.
  EXPECT_EQ(f32_to_fp8(1000.0f, Fp8Kind::e4m3) & 0x7F, 0x7F);
  EXPECT_EQ(f32_to_fp8(1000.0f, Fp8Kind::e4m3, true), 0x7E);
  EXPECT_EQ(f32_to_fp8(-1e6f, Fp8Kind::e5m2), 0xFC);
  EXPECT_EQ(f32_to_fp8(464.0f, Fp8Kind::e4m3), 0x7E);  // tie between 448 and 480 → even (448)
  EXPECT_EQ(f32_to_fp8(-0.0f, Fp8Kind::e4m3), 0x80);
}

TEST(DType, E8m0) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
  EXPECT_EQ(f32_to_e8m0(1.0f), 127);
  EXPECT_EQ(f32_to_e8m0(0.25f), 125);
  EXPECT_EQ(f32_to_e8m0(0.0f), 0xFF);
  for (int b = 0; b < 255; ++b) EXPECT_EQ(f32_to_e8m0(e8m0_to_f32(static_cast<uint8_t>(b))), b);
}

TEST(DType, Names) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType d = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  }
  EXPECT_THROW(dtype_from_name("f33"), std::exception);
  (void)bits_of;
}

}  // namespace
}  // namespace hp
