// AVX2 + FMA primitives for the flash-attention template (attention_impl.h): a register-blocked
// 6×16 GEMM micro-kernel and a polynomial exp2. Compiled with -mavx2 -mfma; called only after the
// CPUID check in attention.cpp.
#include <immintrin.h>

#include <algorithm>

#include "hp/kernels/cpu/attention_impl.h"

namespace hp::kernels::detail {
namespace {

// exp2 on [-127, 127] (NaN propagates): 2^x = 2^n · 2^f with n = round(x), f in [-0.5, 0.5] and
// 2^f from Cephes' degree-6 minimax polynomial (exp2f.c), relative error about 2e-7 (checked by
// attention_test over the whole range). x <= -127 (and -inf) give 2^-127 · p → exponent field 0,
// i.e. 0, so anything below 2^-126 flushes to zero.
inline __m256 exp2_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(127.0f), x);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// C[MR, 8·NV] (+)= A[MR, K] · B[K, 8·NV] in registers (MR·NV <= 12 accumulators). kATrans selects
// how A is walked: rows contiguous (rsa == 1, the transposed-probability case) or columns
// contiguous (csa == 1, q/k/v rows read in place).
template <int MR, int NV, bool kATrans>
inline void micro_tile(int64_t K, const float* a, int64_t rsa, int64_t csa, const float* b,
                       int64_t ldb, float* c, int64_t ldc, bool acc) {
  __m256 r[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      r[i][v] = acc ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
  const float* ap[MR];
  for (int i = 0; i < MR; ++i) ap[i] = a + i * rsa;
  for (int64_t k = 0; k < K; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + k * ldb + 8 * v);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 ai =
          kATrans ? _mm256_broadcast_ss(a + k * csa + i) : _mm256_broadcast_ss(ap[i] + k);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) r[i][v] = _mm256_fmadd_ps(ai, bv[v], r[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + i * ldc + 8 * v, r[i][v]);
}

template <int NV, bool kATrans>
void row_panel(int64_t mr, int64_t K, const float* a, int64_t rsa, int64_t csa, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool acc) {
  switch (mr) {
    case 6:
      return micro_tile<6, NV, kATrans>(K, a, rsa, csa, b, ldb, c, ldc, acc);
    case 5:
      return micro_tile<5, NV, kATrans>(K, a, rsa, csa, b, ldb, c, ldc, acc);
    case 4:
      return micro_tile<4, NV, kATrans>(K, a, rsa, csa, b, ldb, c, ldc, acc);
    case 3:
      return micro_tile<3, NV, kATrans>(K, a, rsa, csa, b, ldb, c, ldc, acc);
    case 2:
      return micro_tile<2, NV, kATrans>(K, a, rsa, csa, b, ldb, c, ldc, acc);
    default:
      return micro_tile<1, NV, kATrans>(K, a, rsa, csa, b, ldb, c, ldc, acc);
  }
}

template <bool kATrans>
void gemm_impl(int64_t M, int64_t N, int64_t K, const float* a, int64_t rsa, int64_t csa,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool acc) {
  // 16-column strips outermost: one strip of B ([K, 16], <= 4 KiB for K = 64) stays in L1 while
  // the 6-row panels of A stream past it.
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    const bool two = N - n0 >= 16;
    for (int64_t m0 = 0; m0 < M; m0 += 6) {
      const int64_t mr = std::min<int64_t>(6, M - m0);
      const float* am = a + m0 * rsa;
      float* cm = c + m0 * ldc + n0;
      if (two)
        row_panel<2, kATrans>(mr, K, am, rsa, csa, b + n0, ldb, cm, ldc, acc);
      else
        row_panel<1, kATrans>(mr, K, am, rsa, csa, b + n0, ldb, cm, ldc, acc);
    }
  }
}

struct Avx2Ops {
  static void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t rsa, int64_t csa,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool acc) {
    if (rsa == 1 && csa != 1)
      gemm_impl<true>(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
    else
      gemm_impl<false>(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
  }

  static void exp2_tile(float* s, int64_t ld, int64_t M, int64_t N, float mul, const float* row_sub,
                        const float* col_sub, float* col_sum) {
    if (col_sum) std::fill(col_sum, col_sum + N, 0.0f);
    const __m256 vmul = _mm256_set1_ps(mul);
    for (int64_t r = 0; r < M; ++r) {
      float* sr = s + r * ld;
      const __m256 rs = _mm256_set1_ps(row_sub ? row_sub[r] : 0.0f);
      for (int64_t c = 0; c < N; c += 8) {
        __m256 x = _mm256_fmsub_ps(vmul, _mm256_loadu_ps(sr + c), rs);
        if (col_sub) x = _mm256_sub_ps(x, _mm256_loadu_ps(col_sub + c));
        const __m256 e = exp2_ps(x);
        _mm256_storeu_ps(sr + c, e);
        if (col_sum) _mm256_storeu_ps(col_sum + c, _mm256_add_ps(_mm256_loadu_ps(col_sum + c), e));
      }
    }
  }
};

}  // namespace

void attention_forward_f32_avx2(const AttentionF32Args& a) {
  FlashAttention<Avx2Ops>::forward(a);
}
void attention_backward_f32_avx2(const AttentionF32Args& a) {
  FlashAttention<Avx2Ops>::backward(a);
}

void attention_exp2_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp2_ps(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tmp[8] = {};
    std::copy(x + i, x + n, tmp);
    _mm256_store_ps(tmp, exp2_ps(_mm256_load_ps(tmp)));
    std::copy(tmp, tmp + (n - i), y + i);
  }
}

}  // namespace hp::kernels::detail
