// FP8 block-scaled weights: dequantize / quantize with the e4m3 codec of mx/format.h.
#include "hp/mx/fp8_blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/mx/format.h"

namespace hp::mx {

namespace {

// Not (a + b - 1) / b, which overflows for a block size near INT64_MAX (config.json sets it).
int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

void check_args(const char* fn, int64_t rows, int64_t cols, Fp8BlockSize b) {
  HP_CHECK(rows >= 0 && cols >= 0, fn, ": negative shape [", rows, ", ", cols, "]");
  HP_CHECK(b.rows > 0 && b.cols > 0, fn, ": block size [", b.rows, ", ", b.cols,
           "] must be positive");
}

}  // namespace

std::vector<int64_t> fp8_block_scale_shape(int64_t rows, int64_t cols, Fp8BlockSize b) {
  check_args("fp8_block_scale_shape", rows, cols, b);
  return {ceil_div(rows, b.rows), ceil_div(cols, b.cols)};
}

std::string fp8_block_scale_name(const std::string& weight_name) {
  return weight_name + "_scale_inv";
}

void fp8_block_dequantize(const uint8_t* codes, const float* scale_inv, int64_t rows, int64_t cols,
                          Fp8BlockSize b, float* out) {
  check_args("fp8_block_dequantize", rows, cols, b);
  const int64_t scale_cols = ceil_div(cols, b.cols);
  // Elementwise, so any split over rows gives the same values.
  parallel_for(0, rows, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const float* s = scale_inv + (r / b.rows) * scale_cols;
                   const uint8_t* c = codes + r * cols;
                   float* o = out + r * cols;
                   for (int64_t j = 0; j < cols; ++j)
                     o[j] = decode_elem(c[j], ElemFormat::e4m3) * s[j / b.cols];
                 }
               });
}

void fp8_block_quantize(const float* x, int64_t rows, int64_t cols, Fp8BlockSize b, uint8_t* codes,
                        float* scale_inv) {
  check_args("fp8_block_quantize", rows, cols, b);
  const int64_t scale_rows = ceil_div(rows, b.rows), scale_cols = ceil_div(cols, b.cols);
  const float max_normal = format_info(ElemFormat::e4m3).max_normal;  // 448
  // One block of rows at a time: each block's amax, then its codes.
  parallel_for(0, scale_rows, 1, [&](int64_t br0, int64_t br1) {
    for (int64_t br = br0; br < br1; ++br) {
      const int64_t r0 = br * b.rows, r1 = std::min(rows, r0 + b.rows);
      for (int64_t bc = 0; bc < scale_cols; ++bc) {
        const int64_t c0 = bc * b.cols, c1 = std::min(cols, c0 + b.cols);
        float amax = 0;
        bool finite = true;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = c0; j < c1; ++j) {
            const float v = x[r * cols + j];
            finite &= std::isfinite(v);
            amax = std::max(amax, std::fabs(v));
          }
        const float s = !finite    ? std::numeric_limits<float>::quiet_NaN()
                        : amax > 0 ? amax / max_normal
                                   : 1.0f;
        scale_inv[br * scale_cols + bc] = s;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = c0; j < c1; ++j)
            codes[r * cols + j] =
                finite ? encode_elem(x[r * cols + j] / s, ElemFormat::e4m3) : kElemNaN;
      }
    }
  });
}

}  // namespace hp::mx
