// AVX2 + FMA primitives for the flash-attention template (attention_impl.h): a register-blocked
// 6×(2·W) GEMM micro-kernel and exp2, written on the SIMD seam (simd_arch.h's Arch, simd_math.h's
// vec_exp2). Compiled with -mavx2 -mfma; called only when the ISA registry selects AVX2
// (attention.cpp). Only AVX2 is instantiated: the template's Ops contract (N a multiple of 8) and
// its 64-wide blocks are sized for 8 lanes.
#define HP_ISA avx2
#include "hp/kernels/cpu/simd_arch.h"

#include <algorithm>

#include "hp/kernels/cpu/attention_impl.h"

namespace hp::kernels::detail {
namespace {

using A = hp::kernels::avx2::Arch;
using V = A::V;
constexpr int W = A::W;
static_assert(W == 8, "attention_impl.h's Ops contract is N % 8 == 0");

// C[MR, W·NV] (+)= A[MR, K] · B[K, W·NV] in registers (MR·NV <= 12 accumulators). kATrans selects
// how A is walked: rows contiguous (rsa == 1, the transposed-probability case) or columns
// contiguous (csa == 1, q/k/v rows read in place).
template <int MR, int NV, bool kATrans>
inline void micro_tile(int64_t K, const float* a, int64_t rsa, int64_t csa, const float* b,
                       int64_t ldb, float* c, int64_t ldc, bool acc) {
  V r[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) r[i][v] = acc ? A::load(c + i * ldc + W * v) : A::set1(0.0f);
  const float* ap[MR];
  for (int i = 0; i < MR; ++i) ap[i] = a + i * rsa;
  for (int64_t k = 0; k < K; ++k) {
    V bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = A::load(b + k * ldb + W * v);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const V ai = A::set1(kATrans ? a[k * csa + i] : ap[i][k]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) r[i][v] = A::fma(ai, bv[v], r[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) A::store(c + i * ldc + W * v, r[i][v]);
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
  // 2·W-column strips outermost: one strip of B ([K, 16], <= 4 KiB for K = 64) stays in L1 while
  // the 6-row panels of A stream past it.
  for (int64_t n0 = 0; n0 < N; n0 += 2 * W) {
    const bool two = N - n0 >= 2 * W;
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

struct SimdOps {
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
    const V vmul = A::set1(mul);
    for (int64_t r = 0; r < M; ++r) {
      float* sr = s + r * ld;
      const V rs = A::neg(A::set1(row_sub ? row_sub[r] : 0.0f));
      for (int64_t c = 0; c < N; c += W) {
        V x = A::fma(vmul, A::load(sr + c), rs);  // mul·s - row_sub, one rounding
        if (col_sub) x = A::sub(x, A::load(col_sub + c));
        const V e = vec_exp2<A>(x);
        A::store(sr + c, e);
        if (col_sum) A::store(col_sum + c, A::add(A::load(col_sum + c), e));
      }
    }
  }
};

}  // namespace

void attention_forward_f32_avx2(const AttentionF32Args& a) {
  FlashAttention<SimdOps>::forward(a);
}
void attention_backward_f32_avx2(const AttentionF32Args& a) {
  FlashAttention<SimdOps>::backward(a);
}

void attention_exp2_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) A::store(y + i, vec_exp2<A>(A::load(x + i)));
  if (i < n) {
    float tmp[W] = {};
    std::copy(x + i, x + n, tmp);
    A::store(tmp, vec_exp2<A>(A::load(tmp)));
    std::copy(tmp, tmp + (n - i), y + i);
  }
}

}  // namespace hp::kernels::detail
