// FP8 block-scaled weights (mx/fp8_blocks.h) against references built on core/dtype's independent
// FP8 conversions: dequantization, DeepSeek's amax / 448 quantization, partial edge blocks, zero
// and NaN blocks, and that requantizing dequantized weights gives back the same codes.
#include "hp/mx/fp8_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hp/core/dtype.h"

namespace hp::mx {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random normal values [rows, cols].
std::vector<float> randn(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = d(g);
  return x;
}

TEST(Fp8Blocks, ScaleShapeAndName) {
  EXPECT_EQ(fp8_block_scale_shape(576, 7168, {}), (std::vector<int64_t>{5, 56}));
  EXPECT_EQ(fp8_block_scale_shape(128, 129, {}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(fp8_block_scale_shape(70, 33, {64, 32}), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(fp8_block_scale_name("model.layers.0.mlp.up_proj.weight"),
            "model.layers.0.mlp.up_proj.weight_scale_inv");
}

// W[i, j] = code · scale_inv[i / 128, j / 128], edge blocks partial (200 × 300: 2 × 3 blocks).
TEST(Fp8Blocks, DequantizeMatchesTheDefinition) {
  const int64_t R = 200, C = 300;
  const Fp8BlockSize b;
  std::mt19937 g(3);
  std::vector<uint8_t> codes(R * C);
  for (auto& c : codes) {
    c = static_cast<uint8_t>(g());
    if ((c & 0x7F) == 0x7F) c = 0x7E;  // no NaN codes here
  }
  std::vector<float> scales = {0.5f, 1e-3f, 3.0f, 7e-5f, 2.0f, 0.25f};  // [2, 3]
  std::vector<float> out(R * C);
  fp8_block_dequantize(codes.data(), scales.data(), R, C, b, out.data());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const float want =
          fp8_to_f32(codes[i * C + j], Fp8Kind::e4m3) * scales[(i / 128) * 3 + j / 128];
      ASSERT_EQ(bits(out[i * C + j]), bits(want)) << i << "," << j;
    }
}

// scale_inv = amax / 448 per block (f32), codes = RNE(x / scale_inv), for blocks of any size.
TEST(Fp8Blocks, QuantizeIsDeepSeeksAmaxOver448) {
  for (const Fp8BlockSize b : {Fp8BlockSize{}, Fp8BlockSize{64, 32}}) {
    const int64_t R = 150, C = 270;
    const auto x = randn(R, C, 5);
    const auto shape = fp8_block_scale_shape(R, C, b);
    std::vector<uint8_t> codes(R * C);
    std::vector<float> scales(shape[0] * shape[1]);
    fp8_block_quantize(x.data(), R, C, b, codes.data(), scales.data());
    std::vector<float> amax(scales.size(), 0.0f);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        float& a = amax[(i / b.rows) * shape[1] + j / b.cols];
        a = std::max(a, std::fabs(x[i * C + j]));
      }
    for (size_t k = 0; k < scales.size(); ++k) ASSERT_EQ(scales[k], amax[k] / 448.0f) << k;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const float s = scales[(i / b.rows) * shape[1] + j / b.cols];
        ASSERT_EQ(codes[i * C + j], f32_to_fp8(x[i * C + j] / s, Fp8Kind::e4m3, true))
            << i << "," << j;
      }
  }
}

// Every block's largest code is ±448, so quantizing the dequantized weight finds the same scale
// and the same codes: an export of a loaded FP8 checkpoint keeps its codes.
TEST(Fp8Blocks, RequantizingDequantizedWeightsKeepsTheCodes) {
  const int64_t R = 300, C = 200;
  const Fp8BlockSize b;
  const auto x = randn(R, C, 9);
  std::vector<uint8_t> codes(R * C), codes2(R * C);
  std::vector<float> scales(3 * 2), scales2(3 * 2), w(R * C);
  fp8_block_quantize(x.data(), R, C, b, codes.data(), scales.data());
  fp8_block_dequantize(codes.data(), scales.data(), R, C, b, w.data());
  fp8_block_quantize(w.data(), R, C, b, codes2.data(), scales2.data());
  EXPECT_EQ(codes2, codes);
  for (size_t k = 0; k < scales.size(); ++k) EXPECT_NEAR(scales2[k], scales[k], 1e-7 * scales[k]);
}

// An all-zero block gets scale 1 (no division by zero); a NaN or Inf marks its whole block NaN
// and no other block.
TEST(Fp8Blocks, ZeroAndNonFiniteBlocks) {
  const int64_t R = 4, C = 6;
  const Fp8BlockSize b{2, 3};  // 2 × 2 blocks
  std::vector<float> x(R * C, 0.0f);
  x[0 * C + 4] = 1.0f;      // block (0, 1)
  x[2 * C + 1] = NAN;       // block (1, 0)
  x[3 * C + 5] = INFINITY;  // block (1, 1)
  std::vector<uint8_t> codes(R * C);
  std::vector<float> scales(4);
  fp8_block_quantize(x.data(), R, C, b, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 1.0f / 448.0f);
  EXPECT_TRUE(std::isnan(scales[2]));
  EXPECT_TRUE(std::isnan(scales[3]));
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const uint8_t want = i >= 2 ? 0x7F : (i == 0 && j == 4) ? 0x7E : 0x00;
      EXPECT_EQ(codes[i * C + j], want) << i << "," << j;
    }
  std::vector<float> w(R * C);
  fp8_block_dequantize(codes.data(), scales.data(), R, C, b, w.data());
  EXPECT_EQ(w[0 * C + 4], 1.0f);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_TRUE(std::isnan(w[3 * C + 0]));
}

}  // namespace
}  // namespace hp::mx
