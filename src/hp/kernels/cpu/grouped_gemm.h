// Grouped GEMM for mixture-of-experts: rows of one operand are split into contiguous groups (the
// token-expert assignments sorted by expert) and each group multiplies its own weight matrix.
//
// Groups are given by int32 end offsets: group g owns rows [group_end[g-1], group_end[g]) (with
// group_end[-1] = 0), so group_end is non-decreasing and group_end[G-1] is the total row count. An
// empty group does no work (its wgrad output is zero-filled). Each group's output is cut into
// tiles by its own shape alone (one tile unless the group is large), and the tiles of all groups
// run as one list over the thread pool, each a single-threaded sgemm over the whole K: results are
// bitwise identical for any thread count.
#pragma once

#include <cstdint>

namespace hp::kernels {

// Forward / dgrad: C_g = A_g · op(B_g) for each group g, where A_g = rows of A [total, K] (lda),
// C_g = the same rows of C [total, N] (ldc); B_g = b[g] is [N, K] when trans_b (a Linear weight
// [out, in]), else [K, N]; ldb is B_g's row stride. beta 0 overwrites C, 1 accumulates into it.
void grouped_gemm_f32(bool trans_b, int64_t groups, const int32_t* group_end, int64_t N, int64_t K,
                      const float* A, int64_t lda, const float* const* b, int64_t ldb, float beta,
                      float* C, int64_t ldc);

// Weight gradient: C_g = A_gᵀ · B_g for each group, reducing over the group's rows. A [total, M]
// (lda), B [total, N] (ldb); c[g] is [M, N] with row stride ldc, overwritten (beta 0) or
// accumulated into (beta 1).
void grouped_gemm_wgrad_f32(int64_t groups, const int32_t* group_end, int64_t M, int64_t N,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* const* c, int64_t ldc);

}  // namespace hp::kernels
