// Grouped expert GEMMs (kernels/cpu/grouped_gemm.h) against the machine's sgemm, on the MoE shapes
// of bench_v4 (16 experts × ~128 rows, hidden 512, expert intermediate 256) or the given ones.
//
// Rows, one per projection the MoE layer runs (models/moe.cpp GroupedExpertsFn):
//   gate/up fwd   C_g [rows, I] = X_g [rows, H] · W_gᵀ   (W_g [I, H])
//   down fwd      C_g [rows, H] = A_g [rows, I] · W_gᵀ   (W_g [H, I])
//   gate dX       C_g [rows, H] = dG_g [rows, I] · W_g   (W_g [I, H])
//   gate dW       C_g [I, H] = dG_gᵀ · X_g, reducing over the group's rows
// Columns (GFLOP/s, best of reps, 2·M·N·K per group summed over groups):
//   grouped    grouped_gemm_f32 / grouped_gemm_wgrad_f32 (hp threads)
//   per-group  one gemm_f32 per group in turn (each spread over the pool by its own tiles: the
//              previous implementation)
//   ceiling    one OpenBLAS sgemm call with its own threads (= hp threads) on the stacked problem
//              (all groups' rows as one [total, K] operand and one weight): the same FLOPs with no
//              grouping, the rate the machine's sgemm reaches on them
// Usage: build/bench_grouped_gemm [ROWS_PER_GROUP GROUPS HIDDEN INTER REPS]
//   (default 128 16 512 256 20); threads from HP_NUM_THREADS.
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/kernels/cpu/grouped_gemm.h"

namespace {

using namespace hp;

std::vector<float> filled(size_t n, int mod, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i % size_t(mod)) - mod / 2) * scale;
  return v;
}

struct Row {
  const char* name;
  bool wgrad, trans_b;
  int64_t N, K;  // forward/dgrad: C_g [rows, N], reduce over K; wgrad: C_g [K, N] over rows
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 128;
  const int64_t groups = argc > 2 ? std::atoll(argv[2]) : 16;
  const int64_t H = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t I = argc > 4 ? std::atoll(argv[4]) : 256;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 20;
  const int64_t total = rows * groups;
  std::vector<int32_t> ends(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) ends[size_t(g)] = int32_t((g + 1) * rows);
  std::printf("grouped GEMM, %lld groups x %lld rows, hidden %lld, inter %lld, %d threads, best of %d\n",
              (long long)groups, (long long)rows, (long long)H, (long long)I, num_threads(), reps);
  std::printf("%-13s %10s %10s %10s %12s %12s\n", "projection", "grouped", "per-group", "ceiling",
              "vs ceiling", "vs per-group");
  const std::vector<Row> table{{"gate/up fwd", false, true, I, H},
                               {"down fwd", false, true, H, I},
                               {"gate dX", false, false, H, I},
                               {"gate dW", true, false, H, I}};
  for (const Row& r : table) {
    const int64_t wn = r.N * r.K;  // one weight / one wgrad output
    const std::vector<float> a = filled(size_t(total * r.K), 13, 0.0625f),
                             w = filled(size_t(groups * wn), 11, 0.125f),
                             bw = filled(size_t(total * r.N), 7, 0.25f);
    std::vector<float> c(size_t(r.wgrad ? groups * wn : total * r.N));
    std::vector<const float*> wp;
    std::vector<float*> cp;
    for (int64_t g = 0; g < groups; ++g) {
      wp.push_back(w.data() + g * wn);
      cp.push_back(c.data() + g * wn);
    }
    // Forward / dgrad: A [total, K], W_g [N, K] (trans_b) or [K, N]. Wgrad: A [total, K] = dG,
    // B [total, N] = X, C_g [K, N].
    const int64_t ldb = r.trans_b ? r.K : r.N;
    auto grouped = [&] {
      if (r.wgrad)
        kernels::grouped_gemm_wgrad_f32(groups, ends.data(), r.K, r.N, a.data(), r.K, bw.data(),
                                        r.N, 0.0f, cp.data(), r.N);
      else
        kernels::grouped_gemm_f32(r.trans_b, groups, ends.data(), r.N, r.K, a.data(), r.K,
                                  wp.data(), ldb, 0.0f, c.data(), r.N);
    };
    auto per_group = [&] {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t b0 = g * rows;
        if (r.wgrad)
          kernels::gemm_f32(true, false, r.K, r.N, rows, 1.0f, a.data() + b0 * r.K, r.K,
                            bw.data() + b0 * r.N, r.N, 0.0f, cp[size_t(g)], r.N);
        else
          kernels::gemm_f32(false, r.trans_b, rows, r.N, r.K, 1.0f, a.data() + b0 * r.K, r.K,
                            wp[size_t(g)], ldb, 0.0f, c.data() + b0 * r.N, r.N);
      }
    };
    auto ceiling = [&] {
      openblas_set_num_threads(num_threads());
      if (r.wgrad)  // one [K, N] product reducing over all rows: the same FLOPs
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(r.K), int(r.N), int(total), 1.0f,
                    a.data(), int(r.K), bw.data(), int(r.N), 0.0f, c.data(), int(r.N));
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, r.trans_b ? CblasTrans : CblasNoTrans, int(total),
                    int(r.N), int(r.K), 1.0f, a.data(), int(r.K), w.data(), int(ldb), 0.0f,
                    c.data(), int(r.N));
    };
    const double flop = 2.0 * double(total) * double(r.N) * double(r.K);
    const double t_ceil = bench::best_seconds(ceiling, reps);
    const double t_grouped = bench::best_seconds(grouped, reps);
    const double t_per = bench::best_seconds(per_group, reps);
    const double g_grouped = flop / t_grouped / 1e9, g_per = flop / t_per / 1e9,
                 g_ceil = flop / t_ceil / 1e9;
    std::printf("%-13s %10.1f %10.1f %10.1f %12s %12s\n", r.name, g_grouped, g_per, g_ceil,
                bench::ratio_str(g_grouped, g_ceil).c_str(),
                bench::ratio_str(g_grouped, g_per).c_str());
  }
  return 0;
}
