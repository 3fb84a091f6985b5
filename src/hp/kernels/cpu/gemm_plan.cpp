#include "hp/kernels/cpu/gemm_plan.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>

#include "hp/core/error.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/kernels/cpu/omp_threads.h"

namespace hp::kernels::detail {
namespace {

// Below ~128^3 multiply-adds a second thread costs more than it saves: one tile.
constexpr double kMinParallelFma = double(1 << 21);
// Aim for tiles of at least 1024^2 outputs: each tile is a separate sgemm call that packs its own
// panels. Single-threaded OpenBLAS on 2048^3, GFLOP per CPU-second: one call 81-83, 1024x1024
// tiles 67-80, 1024x512 74, 2048x512 63-69, 256x2048 63-71.
constexpr int64_t kTileArea = int64_t(1) << 20;
// 2..16 tiles balance 1, 2, 4, 8 or 16 threads without depending on how many there are.
constexpr int64_t kMinTiles = 2, kMaxTiles = 16;
// A tile is never split below this many rows/columns.
constexpr int64_t kMinTileDim = 64;
// Caps the f32 panels the bf16 path widens per tile ([tile_m, K chunk] + [K chunk, tile_n]).
constexpr int64_t kMaxTileDim = 2048;
// Tile edges are multiples of the micro-kernel's register block.
constexpr int64_t kTileAlign = 16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

void check_ld(const char* name, int64_t ld, int64_t cols, const char* what) {
  if (ld < std::max<int64_t>(1, cols))
    HP_THROW(ValueError, "gemm", name, "=", ld, " is smaller than max(1, ", cols, ") (", what, ")");
}

}  // namespace

TilePlan plan_tiles(int64_t M, int64_t N, int64_t K) {
  TilePlan p;
  p.tile_m = std::max<int64_t>(M, 1);
  p.tile_n = std::max<int64_t>(N, 1);
  if (double(M) * double(N) * double(K) < kMinParallelFma) return p;

  const double area = double(M) * double(N);
  int64_t target = kMinTiles;
  while (target < kMaxTiles && area >= double(2 * target) * double(kTileArea)) target *= 2;
  // Split the longer side of the current tile first, so tiles stay close to square.
  while (p.grid_m * p.grid_n < target) {
    const int64_t tm = ceil_div(M, p.grid_m), tn = ceil_div(N, p.grid_n);
    if (tn >= tm && tn >= 2 * kMinTileDim)
      p.grid_n *= 2;
    else if (tm >= 2 * kMinTileDim)
      p.grid_m *= 2;
    else if (tn >= 2 * kMinTileDim)
      p.grid_n *= 2;
    else
      break;
  }
  p.grid_m = std::max(p.grid_m, ceil_div(M, kMaxTileDim));
  p.grid_n = std::max(p.grid_n, ceil_div(N, kMaxTileDim));
  p.tile_m = std::min(M, round_up(ceil_div(M, p.grid_m), kTileAlign));
  p.tile_n = std::min(N, round_up(ceil_div(N, p.grid_n), kTileAlign));
  p.grid_m = ceil_div(M, p.tile_m);
  p.grid_n = ceil_div(N, p.tile_n);
  return p;
}

void check_gemm_args(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                     const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb,
                     int64_t stride_b, const void* C, int64_t ldc, int64_t stride_c) {
  if (batch < 0 || M < 0 || N < 0 || K < 0)
    HP_THROW(ValueError, "gemm", "negative size: batch=", batch, " M=", M, " N=", N, " K=", K);
  check_ld("lda", lda, trans_a ? M : K, trans_a ? "A is [K, M] with trans_a" : "A is [M, K]");
  check_ld("ldb", ldb, trans_b ? K : N, trans_b ? "B is [N, K] with trans_b" : "B is [K, N]");
  check_ld("ldc", ldc, N, "C is [M, N]");
  if (stride_a < 0 || stride_b < 0 || stride_c < 0)
    HP_THROW(ValueError, "gemm", "negative batch stride: stride_a=", stride_a,
             " stride_b=", stride_b, " stride_c=", stride_c);
  // Two batch entries writing the same C elements would race (and be meaningless).
  if (batch > 1 && M > 0 && N > 0 && stride_c < (M - 1) * ldc + N)
    HP_THROW(ValueError, "gemm", "stride_c=", stride_c, " makes the ", M, "x", N,
             " outputs of consecutive batch entries overlap (ldc=", ldc, ")");
  const bool empty = batch == 0 || M == 0 || N == 0;
  if (!empty && C == nullptr) HP_THROW(ValueError, "gemm", "C is null for M=", M, " N=", N);
  if (!empty && K > 0 && (A == nullptr || B == nullptr))
    HP_THROW(ValueError, "gemm", "A or B is null for M=", M, " N=", N, " K=", K);
}

void sgemm_tile(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc) {
  if (active_isa() == Isa::avx512) {
    const OmpThreads one(1);
    const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                        lda, B, ldb, beta, C, ldc);
    HP_CHECK(st == dnnl_success, "oneDNN sgemm ", M, "x", N, "x", K, " failed with status ",
             int(st));
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string sgemm_library() {
  if (active_isa() == Isa::avx512) return "oneDNN sgemm";
  return std::string("OpenBLAS sgemm (") + openblas_get_corename() + ")";
}

void blas_single_threaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void widen_bf16(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  const auto convert = kernel_table<EwTable>().bf16_to_f32;
  for (int64_t r = 0; r < rows; ++r) convert(src + r * ld, dst + r * cols, cols);
}

void narrow_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld) {
  const auto convert = kernel_table<EwTable>().f32_to_bf16;
  for (int64_t r = 0; r < rows; ++r) convert(src + r * cols, dst + r * ld, cols);
}

void scale_rows(int64_t M, int64_t N, float beta, void* C, DType c_dtype, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    if (c_dtype == DType::f32) {
      float* c = static_cast<float*>(C) + m * ldc;
      for (int64_t n = 0; n < N; ++n) c[n] = beta == 0.0f ? 0.0f : beta * c[n];
    } else {
      uint16_t* c = static_cast<uint16_t*>(C) + m * ldc;
      for (int64_t n = 0; n < N; ++n)
        c[n] = beta == 0.0f ? uint16_t(0) : f32_to_bf16(beta * bf16_to_f32(c[n]));
    }
  }
}

}  // namespace hp::kernels::detail
