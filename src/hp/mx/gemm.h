// MX GEMM (docs/ARCHITECTURE.md §4): C [M, N] = alpha · A · Bᵀ (+ beta · C) with both operands
// MXFP8-quantized along the reduction dim K, FP32 accumulation, f32 or bf16 output.
//
// A is the [M, K] operand and B the [N, K] operand of the product. Each is given by its codes and
// E8M0 scales in one of two layouts, so that fprop, dgrad and wgrad all use a quantization of the
// tensor as it is stored and never requantize a transpose:
//   rowwise_k  the operand is stored [rows, K] and quantized row-wise (blocks of 32 along K):
//              codes [rows, K], scales [rows, ceil(K/32)]   (quantize_rowwise).
//   colwise_k  the operand is stored in its original orientation [K, rows] and quantized
//              column-wise (blocks of 32 along dim 0 = K): codes [K, rows], scales
//              [ceil(K/32), rows]   (quantize_colwise).
// Training GEMMs:  fprop  Y = X·Wᵀ   A = X row-wise [T, in],      B = W row-wise [out, in]
//                  dgrad  dX = dY·W  A = dY row-wise [T, out],    B = W col-wise (stored [out, in])
//                  wgrad  dW = dYᵀ·X A = dY col-wise ([T, out]),  B = X col-wise ([T, in])
//
// The result equals "dequantize both operands to f32, then an f32 GEMM" up to the f32 summation
// order (exactly so when all partial sums are exact). Scale byte 0xFF (a NaN block) gives NaN.
//
// On CPUs without FP8 arithmetic codes × 2^scale are decoded into panels while packing: bf16
// panels for the native bf16 tile kernel where the bf16 GEMM is native (gemm_native.h
// native_bf16_gemm) and every block of both operands decodes to a bf16 normal (mx_gemm_uses_bf16),
// else f32 panels for the library sgemm (exact decode, any scale). One single-threaded call per C
// tile and K chunk, with the tiles spread over hp::parallel_for; the tile grid and K chunks depend
// on the shape only, so results are bitwise identical for any thread count. The interface carries
// no CPU assumption: FP8 hardware consumes the same codes and scales directly.
#pragma once

#include <cstdint>

#include "hp/core/dtype.h"
#include "hp/mx/format.h"

namespace hp::mx {

// Where the blocks of an operand lie relative to the reduction dim K (see above).
enum class MxLayout : uint8_t { rowwise_k, colwise_k };

// One quantized GEMM operand: the [rows, K] matrix of the product, stored as described by layout.
struct MxOperand {
  const uint8_t* codes = nullptr;   // rowwise_k: [rows, K]; colwise_k: [K, rows]
  const uint8_t* scales = nullptr;  // rowwise_k: [rows, ceil(K/32)]; colwise_k: [ceil(K/32), rows]
  ElemFormat elem = ElemFormat::e4m3;
  MxLayout layout = MxLayout::rowwise_k;
};

// C [M, N] (row-major, contiguous, c_dtype f32 or bf16) = alpha · A [M, K] · B [N, K]ᵀ + beta · C.
// beta == 0 means C is not read. bf16 output is rounded once (nearest even) from the f32 result.
void mx_gemm(const MxOperand& a, const MxOperand& b, int64_t M, int64_t N, int64_t K, void* c,
             DType c_dtype, float alpha = 1.0f, float beta = 0.0f);

// True where mx_gemm(a, b, M, N, K, ...) decodes to bf16 panels and runs the native bf16 tile
// kernel; false where it takes the f32 path (no native bf16, or a scale byte of either operand
// whose blocks could leave bf16's normal range). The grouped forms decide the same way.
bool mx_gemm_uses_bf16(const MxOperand& a, const MxOperand& b, int64_t M, int64_t N, int64_t K);

// Grouped GEMM over token groups with per-group weights (MoE fprop and dgrad). Groups are row
// ranges of A given by END offsets group_ends[G] (non-decreasing, last <= M; group g = rows
// [group_ends[g-1], group_ends[g]), group_ends[-1] = 0). For each g:
//   C[rows of g] [M_g, N] = alpha · A[rows of g] [M_g, K] · B_g [N, K]ᵀ + beta · C[rows of g].
// a must be rowwise_k (codes [M, K], scales [M, ceil(K/32)]). B holds G operands stacked in group
// order, each laid out as in mx_gemm: rowwise_k codes [G, N, K], scales [G, N, ceil(K/32)];
// colwise_k (weights [G, K, N] quantized per group along dim 1) codes [G, K, N], scales
// [G, ceil(K/32), N]. Rows of C at or past group_ends[G-1] are not touched.
void mx_grouped_gemm(const MxOperand& a, const MxOperand& b, const int32_t* group_ends,
                     int64_t num_groups, int64_t M, int64_t N, int64_t K, void* c, DType c_dtype,
                     float alpha = 1.0f, float beta = 0.0f);

// Grouped GEMM whose groups lie along the reduction dim (MoE wgrad): for each group g of token rows
// [group_ends[g-1], group_ends[g]) of the stored operands,
//   C_g [M, N] = alpha · A_gᵀ · B_g + beta · C_g,   A_g = rows of g of the stored [T, M] matrix,
//                                                    B_g = rows of g of the stored [T, N] matrix.
// a and b must be colwise_k in the GROUPED column-wise layout of quantize_grouped_colwise (codes
// [T, M] / [T, N], scales [grouped_colwise_scale_rows(...), M or N]): blocks restart at each group
// start, so every group is a plain column-wise operand. C is [G, M, N]; an empty group gives
// C_g = beta · C_g (zeros when beta == 0). T is only used for argument checks.
void mx_grouped_gemm_wgrad(const MxOperand& a, const MxOperand& b, const int32_t* group_ends,
                           int64_t num_groups, int64_t T, int64_t M, int64_t N, void* c,
                           DType c_dtype, float alpha = 1.0f, float beta = 0.0f);

}  // namespace hp::mx
