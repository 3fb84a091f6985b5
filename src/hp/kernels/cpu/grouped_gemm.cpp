// Grouped GEMM: every group's product is cut into C tiles by a plan that depends only on that
// group's shape, and the tiles of all groups go to the thread pool as one list (dynamically
// scheduled). Each output element is still produced by one single-threaded sgemm call over its
// whole K, so the bits do not depend on the thread count or on which thread ran which tile.
//
// Why one list rather than one gemm_f32 per group (the previous implementation): MoE groups are
// small (bench_v4: 16 experts × ~128 rows, K 256–512), so a per-group gemm_f32 cut each group into
// a few ~128×128 tiles and waited for them before starting the next group: 16 pool barriers per
// projection, threads idle on the uneven last tiles, and per-call packing overhead on tiles too
// small to amortize it. With many groups, parallelism across groups is enough: a group is one tile
// (one sgemm call) unless it is large on its own. Figures: bench/bench_grouped_gemm.cpp and
// docs/PERFORMANCE.md.
#include "hp/kernels/cpu/grouped_gemm.h"


#include <algorithm>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm_plan.h"

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

// A group whose product has fewer multiply-adds than this (512^3) is one tile. Cutting it costs
// per-call packing while other groups keep the threads busy: on 16 groups of 128 or 256 rows
// (hidden 512, inter 256), one sgemm per group reached 5-15% more GFLOP/s per thread than the
// groups cut by plan_tiles (bench_grouped_gemm at 1 thread, loaded machine).
constexpr double kWholeGroupFma = double(1 << 27);

// One C tile [mt, nt] at (m0, n0) of group g, whose rows are [begin, end).
struct Tile {
  int64_t g, begin, end, m0, n0, mt, nt;
};

// The tiles of every group's C [M_g, N] (M_g, K_g from the group's row count via shape_of), in
// group order. A plan depends on the group's shape only.
template <class ShapeOf>
std::vector<Tile> plan_groups(int64_t groups, const int32_t* group_end, int64_t N,
                              const ShapeOf& shape_of) {
  std::vector<Tile> tiles;
  int64_t begin = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t end = group_end[g];
    const auto [M, K] = shape_of(end - begin);
    if (M > 0 && N > 0 && K > 0) {
      detail::TilePlan p;
      if (double(M) * double(N) * double(K) < kWholeGroupFma) {
        p.tile_m = M;
        p.tile_n = N;
      } else {
        p = detail::plan_tiles(M, N, K);
      }
      for (int64_t m0 = 0; m0 < M; m0 += p.tile_m)
        for (int64_t n0 = 0; n0 < N; n0 += p.tile_n)
          tiles.push_back({g, begin, end, m0, n0, std::min(p.tile_m, M - m0),
                           std::min(p.tile_n, N - n0)});
    }
    begin = end;
  }
  return tiles;
}

template <class TileFn>
void run_tiles(const std::vector<Tile>& tiles, const TileFn& fn) {
  detail::blas_single_threaded();
  parallel_blocks(static_cast<int64_t>(tiles.size()), 1,
                  [&](int64_t t, int64_t, int64_t) { fn(tiles[size_t(t)]); });
}

}  // namespace

void grouped_gemm_f32(bool trans_b, int64_t groups, const int32_t* group_end, int64_t N, int64_t K,
                      const float* A, int64_t lda, const float* const* b, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  check_offsets(groups, group_end);
  const auto tiles = plan_groups(groups, group_end, N, [K](int64_t rows) {
    return std::pair<int64_t, int64_t>{rows, K};
  });
  // K == 0 (no tiles): C_g = beta·C_g, as gemm_f32 does.
  if (K == 0 && N > 0) {
    const int64_t total = groups > 0 ? group_end[groups - 1] : 0;
    for (int64_t r = 0; r < total; ++r)
      for (int64_t j = 0; j < N; ++j) C[r * ldc + j] = beta == 0.0f ? 0.0f : beta * C[r * ldc + j];
  }
  run_tiles(tiles, [&](const Tile& t) {
    // A_g rows [begin + m0, +mt); B_g columns [n0, +nt): row n0 of [N, K] or column n0 of [K, N].
    const float* bt = b[t.g] + (trans_b ? t.n0 * ldb : t.n0);
    detail::sgemm_tile(false, trans_b, t.mt, t.nt, K, 1.0f, A + (t.begin + t.m0) * lda, lda, bt,
                       ldb, beta, C + (t.begin + t.m0) * ldc + t.n0, ldc);
  });
}

void grouped_gemm_wgrad_f32(int64_t groups, const int32_t* group_end, int64_t M, int64_t N,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* const* c, int64_t ldc) {
  check_offsets(groups, group_end);
  const auto tiles = plan_groups(groups, group_end, N, [M](int64_t rows) {
    return std::pair<int64_t, int64_t>{M, rows};
  });
  // Empty groups reduce over no rows: C_g = beta·C_g (zeros for beta 0).
  int64_t begin = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (group_end[g] == begin && beta != 1.0f)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < N; ++j)
          c[g][r * ldc + j] = beta == 0.0f ? 0.0f : beta * c[g][r * ldc + j];
    begin = group_end[g];
  }
  run_tiles(tiles, [&](const Tile& t) {
    // A_g stored [rows, M] (its transpose is op(A)), B_g [rows, N]; tile (m0, n0) of c[g].
    detail::sgemm_tile(true, false, t.mt, t.nt, t.end - t.begin, 1.0f, A + t.begin * lda + t.m0,
                       lda, B + t.begin * ldb + t.n0, ldb, beta, c[t.g] + t.m0 * ldc + t.n0, ldc);
  });
}

}  // namespace hp::kernels
