#include "hp/mx/quantize.h"

#include <algorithm>
#include <cstring>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/mx/driver.h"

namespace hp::mx {

namespace {

using detail::ceil_div;
using detail::RowBlock;

// Columns per work item of the tiled (column-wise / dual) drivers: a 32 × 1024 f32 panel is
// 128 KiB, re-read from L2 by the kernels' second pass, which also prefetches the next panel.
constexpr int64_t kTileCols = detail::kMaxTileCols;
constexpr int64_t kB = kBlockSize;
// Code outputs at least this large are written with non-temporal stores: they cannot stay in the
// caches anyway, and streaming them skips the read-for-ownership of every destination line.
int64_t g_stream_bytes = int64_t(16) << 20;

struct Args {
  const char* x;  // [rows, cols], element size esz
  int64_t esz;
  int in_bf16;
  int64_t rows, cols;
  int elem, mode;
  int nt;  // stream the codes (g_stream_bytes)
};

Args make_args(const void* x, DType dt, int64_t rows, int64_t cols, QuantSpec spec, int64_t esz) {
  return {static_cast<const char*>(x),
          esz,
          dt == DType::bf16,
          rows,
          cols,
          spec.elem == ElemFormat::e5m2,
          spec.scale_mode == ScaleMode::rceil,
          rows * cols >= g_stream_bytes};
}

// Copies rows × cols elements at x (row stride ldx) into a zero-padded 32×32 f32 tile.
void pad_tile(const Args& a, const char* x, int64_t rows, int64_t cols, float* tile) {
  std::fill(tile, tile + kB * kB, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t idx = r * a.cols + c;
      tile[r * kB + c] = a.in_bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(x)[idx])
                                   : reinterpret_cast<const float*>(x)[idx];
    }
}

// Rows [r0, r1) row-wise. A partial last block goes through a zero-padded 32-element buffer.
void rowwise_rows(const detail::Kernels& k, const Args& a, int64_t r0, int64_t r1, uint8_t* codes,
                  uint8_t* scales) {
  const int64_t nbc = ceil_div(a.cols, kB), full = a.cols / kB, tail = a.cols % kB;
  if (tail == 0) {  // the rows are one contiguous run of blocks
    k.quant_row_blocks(a.x + r0 * a.cols * a.esz, a.in_bf16, (r1 - r0) * nbc, a.elem, a.mode,
                       codes + r0 * a.cols, scales + r0 * nbc, a.nt);
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = a.x + r * a.cols * a.esz;
    k.quant_row_blocks(row, a.in_bf16, full, a.elem, a.mode, codes + r * a.cols, scales + r * nbc,
                       a.nt);
    float buf[kB] = {};
    for (int64_t c = 0; c < tail; ++c) {
      const int64_t idx = full * kB + c;
      buf[c] = a.in_bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[idx])
                         : reinterpret_cast<const float*>(row)[idx];
    }
    uint8_t cbuf[kB];
    k.quant_row_blocks(buf, 0, 1, a.elem, a.mode, cbuf, scales + r * nbc + full, 0);
    std::memcpy(codes + r * a.cols + full * kB, cbuf, static_cast<size_t>(tail));
  }
}

void rowwise(const Args& a, uint8_t* codes, uint8_t* scales) {
  const detail::Kernels& k = kernels::kernel_table<detail::Kernels>();
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(a.cols, 1));
  parallel_for(0, a.rows, grain,
               [&](int64_t r0, int64_t r1) { rowwise_rows(k, a, r0, r1, codes, scales); });
}

// Outputs of the tiled driver; row_codes / row_scales are null for column-wise only.
struct TiledOut {
  uint8_t* row_codes;
  uint8_t* row_scales;  // [rows, ceil(cols/32)]
  uint8_t* col_codes;
  uint8_t* col_scales;  // [scale rows, cols]
};

// One 32-row block row × columns [c0, c1): whole 32×32 tiles straight from x, the rest (short block
// rows, a partial last column block) through a zero-padded tile.
void tiled_item(const detail::Kernels& k, const Args& a, const RowBlock& b, int64_t c0, int64_t c1,
                const TiledOut& o) {
  const int64_t nbc = ceil_div(a.cols, kB);
  const bool dual = o.row_codes != nullptr;
  const int64_t full_end = b.nrows == kB ? c0 + (c1 - c0) / kB * kB : c0;
  if (full_end > c0) {
    const char* x = a.x + (b.row0 * a.cols + c0) * a.esz;
    const int64_t off = b.row0 * a.cols + c0;
    uint8_t* cs = o.col_scales + b.scale_row * a.cols + c0;
    if (dual)
      k.quant_dual_tile(x, a.in_bf16, a.cols, full_end - c0, a.elem, a.mode, o.row_codes + off,
                        o.col_codes + off, a.cols, o.row_scales + b.row0 * nbc + c0 / kB, nbc, cs,
                        a.nt);
    else
      k.quant_col_tile(x, a.in_bf16, a.cols, full_end - c0, a.elem, a.mode, o.col_codes + off,
                       a.cols, cs, a.nt);
  }
  for (int64_t c = full_end; c < c1; c += kB) {
    const int64_t nc = std::min(kB, c1 - c);
    float tile[kB * kB];  // [32, 32]
    pad_tile(a, a.x + (b.row0 * a.cols + c) * a.esz, b.nrows, nc, tile);
    uint8_t rcodes[kB * kB], ccodes[kB * kB], rscales[kB], cscales[kB];
    if (dual)
      k.quant_dual_tile(tile, 0, kB, kB, a.elem, a.mode, rcodes, ccodes, kB, rscales, 1, cscales,
                        0);
    else
      k.quant_col_tile(tile, 0, kB, kB, a.elem, a.mode, ccodes, kB, cscales, 0);
    for (int64_t r = 0; r < b.nrows; ++r) {
      const int64_t off = (b.row0 + r) * a.cols + c;
      std::memcpy(o.col_codes + off, ccodes + r * kB, static_cast<size_t>(nc));
      if (dual) {
        std::memcpy(o.row_codes + off, rcodes + r * kB, static_cast<size_t>(nc));
        o.row_scales[(b.row0 + r) * nbc + c / kB] = rscales[r];
      }
    }
    std::memcpy(o.col_scales + b.scale_row * a.cols + c, cscales, static_cast<size_t>(nc));
  }
}

void tiled(const Args& a, const std::vector<RowBlock>& blocks, const TiledOut& o) {
  const detail::Kernels& k = kernels::kernel_table<detail::Kernels>();
  const int64_t nchunks = ceil_div(a.cols, kTileCols);
  const int64_t items = static_cast<int64_t>(blocks.size()) * nchunks;
  parallel_for(0, items, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t c0 = (i % nchunks) * kTileCols;
      tiled_item(k, a, blocks[static_cast<size_t>(i / nchunks)], c0,
                 std::min(a.cols, c0 + kTileCols), o);
    }
  });
}

// Shared checks: shapes, dtype, input pointer; returns the element size.
int64_t check_input(const char* fn, const void* x, DType dt, int64_t rows, int64_t cols) {
  detail::check_dims(fn, rows, cols);
  const int64_t esz = detail::check_float_dtype(fn, "x", dt);
  detail::check_ptr(fn, "x", x, rows * cols);
  return esz;
}

void check_rowwise_out(const char* fn, int64_t rows, int64_t cols, const uint8_t* codes,
                       const uint8_t* scales) {
  detail::check_ptr(fn, "row codes", codes, rows * cols);
  detail::check_ptr(fn, "row scales", scales, rows * ceil_div(cols, kB));
}

void check_colwise_out(const char* fn, int64_t rows, int64_t cols, int64_t scale_rows,
                       const uint8_t* codes, const uint8_t* scales) {
  detail::check_ptr(fn, "column codes", codes, rows * cols);
  detail::check_ptr(fn, "column scales", scales, scale_rows * cols);
}

int64_t group_rows(const int32_t* group_ends, int64_t num_groups) {
  return num_groups > 0 ? group_ends[num_groups - 1] : 0;
}

}  // namespace

void detail::set_stream_bytes(int64_t bytes) {
  g_stream_bytes = bytes;
}

void quantize_rowwise(const void* x, DType x_dtype, int64_t rows, int64_t cols, QuantSpec spec,
                      uint8_t* codes, uint8_t* scales) {
  const char* fn = "quantize_rowwise";
  const int64_t esz = check_input(fn, x, x_dtype, rows, cols);
  check_rowwise_out(fn, rows, cols, codes, scales);
  rowwise(make_args(x, x_dtype, rows, cols, spec, esz), codes, scales);
}

void quantize_colwise(const void* x, DType x_dtype, int64_t rows, int64_t cols, QuantSpec spec,
                      uint8_t* codes, uint8_t* scales) {
  const char* fn = "quantize_colwise";
  const int64_t esz = check_input(fn, x, x_dtype, rows, cols);
  check_colwise_out(fn, rows, cols, ceil_div(rows, kB), codes, scales);
  tiled(make_args(x, x_dtype, rows, cols, spec, esz), detail::plain_row_blocks(rows),
        {nullptr, nullptr, codes, scales});
}

void quantize_dual(const void* x, DType x_dtype, int64_t rows, int64_t cols, QuantSpec spec,
                   uint8_t* row_codes, uint8_t* row_scales, uint8_t* col_codes,
                   uint8_t* col_scales) {
  const char* fn = "quantize_dual";
  const int64_t esz = check_input(fn, x, x_dtype, rows, cols);
  check_rowwise_out(fn, rows, cols, row_codes, row_scales);
  check_colwise_out(fn, rows, cols, ceil_div(rows, kB), col_codes, col_scales);
  if (rows * cols == 0) return;
  tiled(make_args(x, x_dtype, rows, cols, spec, esz), detail::plain_row_blocks(rows),
        {row_codes, row_scales, col_codes, col_scales});
}

void quantize_grouped_rowwise(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                              const int32_t* group_ends, int64_t num_groups, QuantSpec spec,
                              uint8_t* codes, uint8_t* scales) {
  const char* fn = "quantize_grouped_rowwise";
  const int64_t esz = check_input(fn, x, x_dtype, rows, cols);
  detail::grouped_row_blocks(fn, group_ends, num_groups, rows);  // validates group_ends
  const int64_t used = group_rows(group_ends, num_groups);
  check_rowwise_out(fn, used, cols, codes, scales);
  rowwise(make_args(x, x_dtype, used, cols, spec, esz), codes, scales);
}

void quantize_grouped_colwise(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                              const int32_t* group_ends, int64_t num_groups, QuantSpec spec,
                              uint8_t* codes, uint8_t* scales) {
  const char* fn = "quantize_grouped_colwise";
  const int64_t esz = check_input(fn, x, x_dtype, rows, cols);
  const auto blocks = detail::grouped_row_blocks(fn, group_ends, num_groups, rows);
  check_colwise_out(fn, group_rows(group_ends, num_groups), cols,
                    static_cast<int64_t>(blocks.size()), codes, scales);
  tiled(make_args(x, x_dtype, rows, cols, spec, esz), blocks, {nullptr, nullptr, codes, scales});
}

void quantize_grouped_dual(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                           const int32_t* group_ends, int64_t num_groups, QuantSpec spec,
                           uint8_t* row_codes, uint8_t* row_scales, uint8_t* col_codes,
                           uint8_t* col_scales) {
  const char* fn = "quantize_grouped_dual";
  const int64_t esz = check_input(fn, x, x_dtype, rows, cols);
  const auto blocks = detail::grouped_row_blocks(fn, group_ends, num_groups, rows);
  const int64_t used = group_rows(group_ends, num_groups);
  check_rowwise_out(fn, used, cols, row_codes, row_scales);
  check_colwise_out(fn, used, cols, static_cast<int64_t>(blocks.size()), col_codes, col_scales);
  if (cols == 0) return;
  tiled(make_args(x, x_dtype, rows, cols, spec, esz), blocks,
        {row_codes, row_scales, col_codes, col_scales});
}

}  // namespace hp::mx
