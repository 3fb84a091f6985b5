// GEMM backend: a shape-only tile plan (gemm_plan.h) spread over the pool, each tile one
// single-threaded library call.
//
// f32 tiles: sgemm_tile — OpenBLAS on AVX2 CPUs (Zen 3, quiet, 2 threads, 1024^3: 140.8 GFLOP/s
// against oneDNN 2.6's 128.6), oneDNN's sgemm where the ISA is AVX-512 (Debian's OpenBLAS 0.3.21
// runs its SSE3 fallback on CPUs newer than itself: 27 against 146-156 GFLOP/s on one Emerald
// Rapids core).
//
// bf16 tiles: where native bf16 multiplies pay (bf16_compute_pays(): AMX, or AMD's AVX512_BF16,
// Zen 4 on) and the ISA is avx512, one single-threaded oneDNN matmul over the whole K
// (gemm_native.h), bf16 read in place with f32 accumulation: 0.98-1.17x oneDNN's own
// whole-problem 2-thread bf16 matmul on Emerald Rapids (loaded). Elsewhere the panels widen to f32
// per K chunk (a shift, memory-bound, O((M+N)·K) per tile against O(M·N·K) multiply-adds) and go
// to sgemm_tile — on Emerald Rapids without AMX that is the faster bf16 GEMM, because its
// vdpbf16ps issues at a third of the FMA's rate. Per-shape figures: docs/PERFORMANCE.md.
//
// Threads: every library runs one thread per tile and hp::parallel_for spreads the tiles; each
// output element is produced by one library call (per K chunk, in a fixed order) so 1 and 2
// threads give bitwise identical results and no library oversubscribes the pool.
#include "hp/kernels/cpu/gemm.h"

#include <algorithm>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm_native.h"
#include "hp/kernels/cpu/gemm_plan.h"

namespace hp::kernels {
namespace detail {
namespace {

// The bf16 path widens K in chunks of this size (shape-independent, so the f32 accumulation order
// into C is fixed). Panels [tile_m, 1024] + [1024, tile_n] f32 (<= 16 MiB per thread) stay in L3;
// per CPU-second, bf16 reached 0.82-0.92 of f32 with chunks of 384 or 512 (extra passes over C and
// OpenBLAS splitting K unevenly) and 0.92-0.97 with 1024; 2048 was no better.
constexpr int64_t kKChunk = 1024;

// Offsets of tile (m0, n0, k0) inside the stored A [M, K] / [K, M] and B [K, N] / [N, K].
int64_t a_offset(bool trans_a, int64_t lda, int64_t m0, int64_t k0) {
  return trans_a ? k0 * lda + m0 : m0 * lda + k0;
}
int64_t b_offset(bool trans_b, int64_t ldb, int64_t k0, int64_t n0) {
  return trans_b ? n0 * ldb + k0 : k0 * ldb + n0;
}

// C [M, N] = beta·C, rows spread over the pool.
void scale_c(int64_t M, int64_t N, float beta, void* C, DType c_dtype, int64_t ldc) {
  const size_t row_bytes = size_t(ldc) * dtype_size(c_dtype);
  parallel_for(
      0, M, std::max<int64_t>(1, 65536 / std::max<int64_t>(N, 1)), [&](int64_t b, int64_t e) {
        scale_rows(e - b, N, beta, static_cast<char*>(C) + size_t(b) * row_bytes, c_dtype, ldc);
      });
}

struct F32Problem {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const float* A;
  int64_t lda, stride_a;
  const float* B;
  int64_t ldb, stride_b;
  float beta;
  float* C;
  int64_t ldc, stride_c;
};

struct Bf16Problem {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const uint16_t* A;
  int64_t lda, stride_a;
  const uint16_t* B;
  int64_t ldb, stride_b;
  float beta;
  void* C;
  DType c_dtype;
  int64_t ldc, stride_c;
};

// One C tile [mt, nt] at (m0, n0) of batch entry `i`: a single sgemm over the whole K.
void f32_tile(const F32Problem& p, int64_t i, int64_t m0, int64_t n0, int64_t mt, int64_t nt) {
  const float* A = p.A + i * p.stride_a + a_offset(p.trans_a, p.lda, m0, 0);
  const float* B = p.B + i * p.stride_b + b_offset(p.trans_b, p.ldb, 0, n0);
  float* C = p.C + i * p.stride_c + m0 * p.ldc + n0;
  sgemm_tile(p.trans_a, p.trans_b, mt, nt, p.K, p.alpha, A, p.lda, B, p.ldb, p.beta, C, p.ldc);
}

// One C tile of the bf16 problem: per K chunk, widen the A panel ([mt, kc] or [kc, mt] when
// trans_a) and the B panel ([kc, nt] or [nt, kc] when trans_b) and accumulate with sgemm into
// C (f32 output) or into an f32 tile [mt, nt] that is rounded to bf16 once at the end.
void bf16_tile(const Bf16Problem& p, int64_t i, int64_t m0, int64_t n0, int64_t mt, int64_t nt) {
  thread_local std::vector<float> work;
  const int64_t kc_max = std::min(p.K, kKChunk);
  const bool c_bf16 = p.c_dtype == DType::bf16;
  work.resize(size_t(mt * kc_max + kc_max * nt + (c_bf16 ? mt * nt : 0)));
  float* a_panel = work.data();
  float* b_panel = a_panel + mt * kc_max;
  float* c_out;
  int64_t ldc_out;
  uint16_t* c_bits = nullptr;
  if (c_bf16) {
    c_bits = static_cast<uint16_t*>(p.C) + i * p.stride_c + m0 * p.ldc + n0;
    c_out = b_panel + kc_max * nt;
    ldc_out = nt;
    if (p.beta != 0.0f) widen_bf16(c_bits, p.ldc, mt, nt, c_out);
  } else {
    c_out = static_cast<float*>(p.C) + i * p.stride_c + m0 * p.ldc + n0;
    ldc_out = p.ldc;
  }
  const uint16_t* A = p.A + i * p.stride_a;
  const uint16_t* B = p.B + i * p.stride_b;
  for (int64_t k0 = 0; k0 < p.K; k0 += kKChunk) {
    const int64_t kc = std::min(kKChunk, p.K - k0);
    const uint16_t* a_src = A + a_offset(p.trans_a, p.lda, m0, k0);
    const uint16_t* b_src = B + b_offset(p.trans_b, p.ldb, k0, n0);
    if (p.trans_a)
      widen_bf16(a_src, p.lda, kc, mt, a_panel);
    else
      widen_bf16(a_src, p.lda, mt, kc, a_panel);
    if (p.trans_b)
      widen_bf16(b_src, p.ldb, nt, kc, b_panel);
    else
      widen_bf16(b_src, p.ldb, kc, nt, b_panel);
    const float beta = k0 == 0 ? p.beta : 1.0f;
    sgemm_tile(p.trans_a, p.trans_b, mt, nt, kc, p.alpha, a_panel, p.trans_a ? mt : kc, b_panel,
               p.trans_b ? kc : nt, beta, c_out, ldc_out);
  }
  if (c_bf16) narrow_bf16(c_out, mt, nt, c_bits, p.ldc);
}

// One C tile of the bf16 problem on the native kernel: one oneDNN call over the whole K, reading
// the operands in place (strides and transposes in its memory descriptors) and writing C directly.
void native_bf16_tile(const Bf16Problem& p, int64_t i, int64_t m0, int64_t n0, int64_t mt,
                      int64_t nt) {
  const Bf16Tile t{p.trans_a, p.trans_b, mt,        nt,      p.K,     p.lda,
                   p.ldb,     p.ldc,     p.c_dtype, p.alpha, p.beta};
  const size_t c_off = size_t(i * p.stride_c + m0 * p.ldc + n0) * dtype_size(p.c_dtype);
  bf16_tile_gemm(t, p.A + i * p.stride_a + a_offset(p.trans_a, p.lda, m0, 0),
                 p.B + i * p.stride_b + b_offset(p.trans_b, p.ldb, 0, n0),
                 static_cast<char*>(p.C) + c_off);
}

// Runs tile_fn(batch_index, m0, n0, mt, nt) over batch × tile grid, spread over the pool.
template <class TileFn>
void run_tiles(int64_t batch, int64_t M, int64_t N, int64_t K, const TileFn& tile_fn) {
  blas_single_threaded();
  const TilePlan plan = plan_tiles(M, N, K);
  const int64_t per_batch = plan.count();
  parallel_for(0, batch * per_batch, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t i = t / per_batch, tile = t % per_batch;
      const int64_t m0 = (tile / plan.grid_n) * plan.tile_m;
      const int64_t n0 = (tile % plan.grid_n) * plan.tile_n;
      tile_fn(i, m0, n0, std::min(plan.tile_m, M - m0), std::min(plan.tile_n, N - n0));
    }
  });
}

}  // namespace
}  // namespace detail

void gemm_f32_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                      int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                      int64_t stride_c) {
  detail::check_gemm_args(trans_a, trans_b, batch, M, N, K, A, lda, stride_a, B, ldb, stride_b, C,
                          ldc, stride_c);
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < batch; ++i)
      detail::scale_c(M, N, beta, C + i * stride_c, DType::f32, ldc);
    return;
  }
  const detail::F32Problem p{trans_a,  trans_b, M,   N,        K,    alpha, A,   lda,
                             stride_a, B,       ldb, stride_b, beta, C,     ldc, stride_c};
  detail::run_tiles(batch, M, N, K, [&](int64_t i, int64_t m0, int64_t n0, int64_t mt, int64_t nt) {
    detail::f32_tile(p, i, m0, n0, mt, nt);
  });
}

void gemm_bf16_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                       float alpha, const uint16_t* A, int64_t lda, int64_t stride_a,
                       const uint16_t* B, int64_t ldb, int64_t stride_b, float beta, void* C,
                       DType c_dtype, int64_t ldc, int64_t stride_c) {
  if (c_dtype != DType::f32 && c_dtype != DType::bf16)
    HP_THROW(ValueError, "gemm", "bf16 GEMM output must be f32 or bf16, got ", dtype_name(c_dtype));
  detail::check_gemm_args(trans_a, trans_b, batch, M, N, K, A, lda, stride_a, B, ldb, stride_b, C,
                          ldc, stride_c);
  if (batch == 0 || M == 0 || N == 0) return;
  const size_t c_size = dtype_size(c_dtype);
  if (K == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < batch; ++i)
      detail::scale_c(M, N, beta, static_cast<char*>(C) + i * stride_c * c_size, c_dtype, ldc);
    return;
  }
  const detail::Bf16Problem p{trans_a, trans_b, M,        N,    K, alpha,   A,   lda,     stride_a,
                              B,       ldb,     stride_b, beta, C, c_dtype, ldc, stride_c};
  const bool native = detail::native_bf16_gemm();
  detail::run_tiles(batch, M, N, K, [&](int64_t i, int64_t m0, int64_t n0, int64_t mt, int64_t nt) {
    if (native)
      detail::native_bf16_tile(p, i, m0, n0, mt, nt);
    else
      detail::bf16_tile(p, i, m0, n0, mt, nt);
  });
}

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc) {
  gemm_f32_batched(trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, void* C,
               DType c_dtype, int64_t ldc) {
  gemm_bf16_batched(trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, c_dtype,
                    ldc, 0);
}

}  // namespace hp::kernels
