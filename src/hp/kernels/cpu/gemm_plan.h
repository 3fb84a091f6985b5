// Internals of the GEMM backend shared by gemm.cpp and gemm_peak.cpp: argument checks and the
// shape-only tile grid that makes results independent of the thread count.
#pragma once

#include <cstdint>

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

}  // namespace hp::kernels::detail
