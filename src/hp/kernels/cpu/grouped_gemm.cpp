// Grouped GEMM as one gemm_f32 per non-empty group. Groups run one after another, each spread over
// the thread pool by gemm_f32's shape-determined tiling: that keeps the result independent of the
// thread count and lets a large group use every core. A fused kernel that schedules small groups
// side by side (MegaMoE, docs/ARCHITECTURE.md §6) is the later optimization; this is its reference.
#include "hp/kernels/cpu/grouped_gemm.h"

#include <algorithm>

#include "hp/core/error.h"
#include "hp/kernels/cpu/gemm.h"

namespace hp::kernels {

namespace {
void check_offsets(int64_t groups, const int32_t* group_end) {
  int32_t prev = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (group_end[g] < prev)
      HP_THROW(ValueError, "grouped_gemm", "group_end must be non-decreasing, got group_end[", g,
               "] = ", group_end[g], " after ", prev);
    prev = group_end[g];
  }
}
}  // namespace

void grouped_gemm_f32(bool trans_b, int64_t groups, const int32_t* group_end, int64_t N, int64_t K,
                      const float* A, int64_t lda, const float* const* b, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  check_offsets(groups, group_end);
  int64_t begin = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t end = group_end[g];
    if (end > begin)
      gemm_f32(false, trans_b, end - begin, N, K, 1.0f, A + begin * lda, lda, b[g], ldb, beta,
               C + begin * ldc, ldc);
    begin = end;
  }
}

void grouped_gemm_wgrad_f32(int64_t groups, const int32_t* group_end, int64_t M, int64_t N,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* const* c, int64_t ldc) {
  check_offsets(groups, group_end);
  int64_t begin = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t end = group_end[g];
    if (end > begin) {
      gemm_f32(true, false, M, N, end - begin, 1.0f, A + begin * lda, lda, B + begin * ldb, ldb,
               beta, c[g], ldc);
    } else if (beta == 0.0f) {
      for (int64_t r = 0; r < M; ++r) std::fill(c[g] + r * ldc, c[g] + r * ldc + N, 0.0f);
    }
    begin = end;
  }
}

}  // namespace hp::kernels
