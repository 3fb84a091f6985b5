// GEMM backend: C = alpha·op(A)·op(B) + beta·C on raw row-major pointers (docs/ARCHITECTURE.md §3).
//
// op(A) is [M, K] and op(B) is [K, N]. A is stored [M, K] (lda >= K), or [K, M] (lda >= M) when
// trans_a; B is stored [K, N] (ldb >= N), or [N, K] (ldb >= K) when trans_b; C is [M, N] (ldc >=
// N). Every ld must also be >= 1. As in BLAS, beta == 0 means C is not read (NaNs there are
// overwritten) and alpha == 0 or K == 0 means A and B are not read.
//
// Backend, chosen by measurement: a library sgemm (OpenBLAS on AVX2, oneDNN's on AVX-512), run
// single-threaded per C tile with the tiles spread over hp::parallel_for. The tile grid depends
// only on the shape, so results are bitwise identical for any thread count. bf16 tiles run on
// oneDNN's native bf16 matmul where native bf16 beats f32 (AMX, or AVX512_BF16 at the FMA's rate:
// bf16_compute_pays()) and the avx512 ISA is active (gemm_native.h); elsewhere bf16 inputs are
// widened to f32 panel by panel and fed to the same sgemm. The figures behind this choice are in
// gemm.cpp and docs/PERFORMANCE.md.
#pragma once

#include <cstdint>

#include "hp/core/dtype.h"

namespace hp::kernels {

// f32 GEMM.
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc);

// bf16 inputs (raw bits), f32 accumulation; C is f32 or bf16 (rounded once, to nearest even).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, void* C,
               DType c_dtype, int64_t ldc);

// `batch` independent GEMMs; matrix i starts at A + i·stride_a, B + i·stride_b, C + i·stride_c
// (strides in elements, >= 0; a stride of 0 broadcasts that operand).
void gemm_f32_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                      int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                      int64_t stride_c);

void gemm_bf16_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                       float alpha, const uint16_t* A, int64_t lda, int64_t stride_a,
                       const uint16_t* B, int64_t ldb, int64_t stride_b, float beta, void* C,
                       DType c_dtype, int64_t ldc, int64_t stride_c);

// GFLOP/s this process reaches with gemm_f32 (f32) or gemm_bf16 (bf16 in, f32 out) at a large
// square shape and the current hp::num_threads(); measured on first use (about a second) and
// cached per (dtype, thread count). The trainer's MFU divides by it. Other dtypes throw ValueError.
double gemm_peak_gflops(DType dt);

}  // namespace hp::kernels
