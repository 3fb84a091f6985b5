// Dequantization drivers: decode codes × scale to f32 or bf16, row by row across the thread pool.
#include <algorithm>
#include <cstring>

#include "hp/core/thread_pool.h"
#include "hp/mx/driver.h"
#include "hp/mx/quantize.h"

namespace hp::mx {

namespace detail {

void dequant_row(const Kernels& k, const uint8_t* codes, const uint8_t* scales, int shift,
                 int64_t n, int elem, char* out, int64_t osz) {
  const int64_t full = n / kBlockSize * kBlockSize;
  k.dequant(codes, scales, shift, full, elem, out, osz == 2);
  if (full == n) return;
  uint8_t cbuf[kBlockSize] = {}, sbuf[kBlockSize] = {};
  std::memcpy(cbuf, codes + full, static_cast<size_t>(n - full));
  if (shift == 0)
    std::memcpy(sbuf, scales + full, static_cast<size_t>(n - full));
  else
    sbuf[0] = scales[full >> shift];
  alignas(64) float obuf[kBlockSize];  // f32 or bf16 lanes
  k.dequant(cbuf, sbuf, shift, kBlockSize, elem, obuf, osz == 2);
  std::memcpy(out + full * osz, obuf, static_cast<size_t>((n - full) * osz));
}

}  // namespace detail

namespace {

using detail::ceil_div;
using detail::dequant_row;
constexpr int64_t kB = kBlockSize;


int64_t check_args(const char* fn, const uint8_t* codes, int64_t rows, int64_t cols, void* out,
                   DType out_dtype) {
  detail::check_dims(fn, rows, cols);
  const int64_t osz = detail::check_float_dtype(fn, "out", out_dtype);
  detail::check_ptr(fn, "codes", codes, rows * cols);
  detail::check_ptr(fn, "out", out, rows * cols);
  return osz;
}

int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1));
}

void colwise_blocks(const uint8_t* codes, const uint8_t* scales, int64_t cols, ElemFormat elem,
                    void* out, int64_t osz, const std::vector<detail::RowBlock>& blocks) {
  const detail::Kernels& k = kernels::kernel_table<detail::Kernels>();
  parallel_for(0, static_cast<int64_t>(blocks.size()), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      const detail::RowBlock& b = blocks[static_cast<size_t>(bi)];
      for (int64_t r = b.row0; r < b.row0 + b.nrows; ++r)
        dequant_row(k, codes + r * cols, scales + b.scale_row * cols, 0, cols,
                    elem == ElemFormat::e5m2, static_cast<char*>(out) + r * cols * osz, osz);
    }
  });
}

}  // namespace

void dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                        ElemFormat elem, void* out, DType out_dtype) {
  const char* fn = "dequantize_rowwise";
  const int64_t osz = check_args(fn, codes, rows, cols, out, out_dtype);
  const int64_t nbc = ceil_div(cols, kB);
  detail::check_ptr(fn, "scales", scales, rows * nbc);
  const detail::Kernels& k = kernels::kernel_table<detail::Kernels>();
  parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    if (cols % kB == 0) {  // contiguous run of whole blocks
      dequant_row(k, codes + r0 * cols, scales + r0 * nbc, 5, (r1 - r0) * cols,
                  elem == ElemFormat::e5m2, static_cast<char*>(out) + r0 * cols * osz, osz);
      return;
    }
    for (int64_t r = r0; r < r1; ++r)
      dequant_row(k, codes + r * cols, scales + r * nbc, 5, cols, elem == ElemFormat::e5m2,
                  static_cast<char*>(out) + r * cols * osz, osz);
  });
}

void dequantize_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                        ElemFormat elem, void* out, DType out_dtype) {
  const char* fn = "dequantize_colwise";
  const int64_t osz = check_args(fn, codes, rows, cols, out, out_dtype);
  detail::check_ptr(fn, "scales", scales, ceil_div(rows, kB) * cols);
  colwise_blocks(codes, scales, cols, elem, out, osz, detail::plain_row_blocks(rows));
}

void dequantize_grouped_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                                int64_t cols, const int32_t* group_ends, int64_t num_groups,
                                ElemFormat elem, void* out, DType out_dtype) {
  const char* fn = "dequantize_grouped_colwise";
  detail::check_dims(fn, rows, cols);
  const auto blocks = detail::grouped_row_blocks(fn, group_ends, num_groups, rows);
  const int64_t used = num_groups > 0 ? group_ends[num_groups - 1] : 0;
  const int64_t osz = check_args(fn, codes, used, cols, out, out_dtype);
  detail::check_ptr(fn, "scales", scales, static_cast<int64_t>(blocks.size()) * cols);
  colwise_blocks(codes, scales, cols, elem, out, osz, blocks);
}

}  // namespace hp::mx
