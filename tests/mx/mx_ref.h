// Test helpers: whole-matrix MX quantization built from the scalar reference block quantizer, and
// inputs that exercise every special case.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hp/core/dtype.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/mx/format.h"
#include "hp/mx/quantize.h"

namespace hp::mx::test {

struct Quantized {
  std::vector<uint8_t> codes, scales;
  bool operator==(const Quantized&) const = default;
};

// x [rows, cols] → row-wise codes [rows, cols], scales [rows, ceil(cols/32)].
inline Quantized ref_rowwise(const std::vector<float>& x, int64_t rows, int64_t cols,
                             QuantSpec spec) {
  const int64_t nbc = (cols + 31) / 32;
  Quantized q{std::vector<uint8_t>(x.size()), std::vector<uint8_t>(rows * nbc)};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nbc; ++b) {
      const int64_t n = std::min<int64_t>(32, cols - b * 32);
      q.scales[r * nbc + b] = detail::quantize_block_ref(&x[r * cols + b * 32], n, 1, spec,
                                                         &q.codes[r * cols + b * 32], 1);
    }
  return q;
}

// Column-wise over the row ranges [starts[i], ends[i]) (one group = the whole matrix).
inline Quantized ref_colwise_groups(const std::vector<float>& x, int64_t cols,
                                    const std::vector<int64_t>& ends, QuantSpec spec,
                                    std::vector<uint8_t> codes_init = {}) {
  Quantized q;
  q.codes = codes_init.empty() ? std::vector<uint8_t>(x.size()) : codes_init;
  int64_t start = 0;
  for (int64_t end : ends) {
    for (int64_t r = start; r < end; r += 32) {
      const int64_t n = std::min<int64_t>(32, end - r);
      for (int64_t c = 0; c < cols; ++c)
        q.scales.push_back(detail::quantize_block_ref(&x[r * cols + c], n, cols, spec,
                                                      &q.codes[r * cols + c], cols));
    }
    start = end;
  }
  return q;
}

inline Quantized ref_colwise(const std::vector<float>& x, int64_t rows, int64_t cols,
                             QuantSpec spec) {
  return ref_colwise_groups(x, cols, {rows}, spec);
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = f32_to_bf16(x[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(x[i]);
  return out;
}

// Random data with per-row magnitudes spread over the f32 range and injected special values
// (zeros, −0, denormals, NaN, ±Inf, exact ties, all-zero runs), so that most blocks of either axis
// meet something unusual. `specials` = 0 gives plain scaled normals.
inline std::vector<float> special_matrix(int64_t rows, int64_t cols, uint32_t seed,
                                         double specials = 0.02) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp_dist(-140, 120);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, exp_dist(gen) / (r % 3 == 0 ? 1 : 4));
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(gen) * row_scale;
      if (u(gen) < specials) {
        const float pick[] = {0.0f,      -0.0f,   0x1p-149f, -0x1p-140f, 3e-39f, NAN,      INFINITY,
                              -INFINITY, 1.0625f, 0x1p-10f,  448.0f,     464.0f, 57344.0f, 3.0e38f};
        v = pick[gen() % (sizeof(pick) / sizeof(pick[0]))];
      }
      x[r * cols + c] = v;
    }
    if (r % 7 == 3)  // an all-zero stretch with a −0
      for (int64_t c = 0; c < std::min<int64_t>(cols, 40); ++c)
        x[r * cols + c] = c == 5 ? -0.0f : 0.0f;
  }
  return x;
}

}  // namespace hp::mx::test
