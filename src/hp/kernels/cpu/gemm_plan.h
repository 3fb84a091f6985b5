// Internals of the GEMM backend shared by gemm.cpp, gemm_peak.cpp and the MX GEMM (mx/gemm.cpp):
// argument checks, the shape-only tile grid that makes results independent of the thread count,
// the one OpenBLAS thread policy, and the panel conversions (the SIMD dtype converters of the
// active ISA, the same ones behind Tensor::to).
#pragma once

#include <cstdint>
#include <string>

#include "hp/core/dtype.h"

namespace hp::kernels::detail {

// C [M, N] is cut into grid_m × grid_n tiles of at most tile_m × tile_n; each tile is one
// single-threaded library call over the whole K, so no sum is ever split between threads.
struct TilePlan {
  int64_t tile_m = 0, tile_n = 0;
  int64_t grid_m = 1, grid_n = 1;
  int64_t count() const { return grid_m * grid_n; }
};

// Depends on (M, N, K) only, never on hp::num_threads().
TilePlan plan_tiles(int64_t M, int64_t N, int64_t K);

// Throws ValueError("[gemm] ...") naming the offending size, ld or stride.
void check_gemm_args(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                     const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb,
                     int64_t stride_b, const void* C, int64_t ldc, int64_t stride_c);

// The one f32 BLAS call of every tile (gemm.cpp, grouped_gemm.cpp, mx/gemm.cpp), on the calling
// thread, row-major as cblas_sgemm: C [M, N] = alpha·op(A)·op(B) + beta·C (beta 0 does not read C).
// Where the active ISA is AVX-512 it is oneDNN's sgemm with one OpenMP thread: oneDNN JITs for the
// CPU it finds, while Debian's OpenBLAS 0.3.21 falls back to its SSE3 ("Prescott") kernels on CPUs
// newer than itself (Emerald Rapids, one core: 27 GFLOP/s against oneDNN's 146-156). Elsewhere
// OpenBLAS (single-threaded, blas_single_threaded()).
void sgemm_tile(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc);
// "oneDNN sgemm" or "OpenBLAS sgemm (Haswell)": the library sgemm_tile calls now.
std::string sgemm_library();

// OpenBLAS keeps one global thread count that anyone (a benchmark, numpy) may have raised; every
// library call here runs single-threaded inside one tile and the pool provides the parallelism.
void blas_single_threaded();

// dst [rows, cols] (dense) = widen(src [rows, cols] with row stride ld). Exact.
void widen_bf16(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst);
// dst [rows, cols] (row stride ld) = src [rows, cols] (dense) rounded to bf16, nearest even.
void narrow_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld);
// C [M, N] (row stride ldc, f32 or bf16) = beta·C; beta == 0 writes zeros without reading C
// (the K == 0 / alpha == 0 cases of a GEMM).
void scale_rows(int64_t M, int64_t N, float beta, void* C, DType c_dtype, int64_t ldc);

}  // namespace hp::kernels::detail
