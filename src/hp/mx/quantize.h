// MXFP8 quantization and dequantization kernels at raw-pointer level (docs/ARCHITECTURE.md §4).
//
// All matrices are row-major and contiguous. Inputs are f32 or bf16 (DType::f32 / DType::bf16);
// codes are FP8 bytes (E4M3 or E5M2 per QuantSpec), scales are E8M0 bytes. A partial last block is
// quantized as if zero-padded. Work is split across the hp thread pool by whole blocks, so results
// are bitwise identical for any thread count. Bad arguments throw hp::ValueError "[mx] ...".
// Code outputs of 16 MiB or more are written with non-temporal stores (they would not stay cached).
//
// Layouts (R = rows, C = cols):
//   row-wise     blocks of 32 along the last dim: codes [R, C], scales [R, ceil(C/32)].
//   column-wise  blocks of 32 along dim 0: codes [R, C] (same layout as x), scales [ceil(R/32), C].
//   grouped      groups are row ranges given by END offsets group_ends[G] (non-decreasing, each
//                <= R); group g holds rows [group_ends[g-1], group_ends[g]) with group_ends[-1] =
//                0. Groups may be empty or any size. Rows at or past group_ends[G-1] are neither
//                read nor written.
//     grouped row-wise: row-wise blocks never span rows, so the layout is exactly row-wise
//                (codes [R, C], scales [R, ceil(C/32)]); only rows inside groups are written.
//     grouped column-wise: column blocks restart at every group start and never cross a group
//                end; a group of n rows owns ceil(n/32) scale rows, stacked in group order:
//                scales [S, C] with S = grouped_colwise_scale_rows(...) = sum_g ceil(n_g/32)
//                (<= ceil(R/32) + G), group g's scale rows starting at sum_{h<g} ceil(n_h/32).
//                Codes [R, C] as for column-wise.
#pragma once

#include <cstdint>
#include <string_view>

#include "hp/core/dtype.h"
#include "hp/mx/format.h"

namespace hp::mx {

// Row-wise quantization. x [rows, cols]; codes [rows, cols]; scales [rows, ceil(cols/32)].
void quantize_rowwise(const void* x, DType x_dtype, int64_t rows, int64_t cols, QuantSpec spec,
                      uint8_t* codes, uint8_t* scales);

// Column-wise quantization. x [rows, cols]; codes [rows, cols]; scales [ceil(rows/32), cols].
void quantize_colwise(const void* x, DType x_dtype, int64_t rows, int64_t cols, QuantSpec spec,
                      uint8_t* codes, uint8_t* scales);

// Both axes from one read of x (tiles of 32×32): the row-wise and column-wise outputs above.
void quantize_dual(const void* x, DType x_dtype, int64_t rows, int64_t cols, QuantSpec spec,
                   uint8_t* row_codes, uint8_t* row_scales, uint8_t* col_codes,
                   uint8_t* col_scales);

// Grouped (MoE) row-wise: layout of quantize_rowwise, rows past group_ends[G-1] untouched.
void quantize_grouped_rowwise(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                              const int32_t* group_ends, int64_t num_groups, QuantSpec spec,
                              uint8_t* codes, uint8_t* scales);

// Grouped (MoE) column-wise: codes [rows, cols], scales [grouped_colwise_scale_rows(...), cols].
void quantize_grouped_colwise(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                              const int32_t* group_ends, int64_t num_groups, QuantSpec spec,
                              uint8_t* codes, uint8_t* scales);

// Grouped dual: grouped row-wise and grouped column-wise outputs from one read of x.
void quantize_grouped_dual(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                           const int32_t* group_ends, int64_t num_groups, QuantSpec spec,
                           uint8_t* row_codes, uint8_t* row_scales, uint8_t* col_codes,
                           uint8_t* col_scales);

// Scale rows of the grouped column-wise layout: sum over groups of ceil(group size / 32).
int64_t grouped_colwise_scale_rows(const int32_t* group_ends, int64_t num_groups, int64_t rows);

// Row-wise dequantization to f32 or bf16 (RNE). codes [rows, cols], scales [rows, ceil(cols/32)],
// out [rows, cols]. Scale byte 0xFF yields NaN.
void dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                        ElemFormat elem, void* out, DType out_dtype);

// Column-wise dequantization: codes [rows, cols], scales [ceil(rows/32), cols], out [rows, cols].
void dequantize_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                        ElemFormat elem, void* out, DType out_dtype);

// Grouped column-wise dequantization (layout above); rows past group_ends[G-1] untouched.
void dequantize_grouped_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                                int64_t cols, const int32_t* group_ends, int64_t num_groups,
                                ElemFormat elem, void* out, DType out_dtype);

}  // namespace hp::mx
