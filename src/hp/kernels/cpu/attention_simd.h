// The SIMD Ops of the flash-attention template (attention_impl.h), written once on the SIMD seam
// (simd_arch.h's Arch, simd_math.h's vec_exp2) for every vector ISA: a register-blocked
// MR×(NV·W) GEMM micro-kernel and the tile exp2. Included only by an ISA translation unit
// (attention_avx2.cpp, attention_avx512.cpp) after it defines HP_ISA and includes simd_arch.h;
// that TU picks the tile shape for its register file and returns kernels<MR, NV>().
//
// Everything but kernels() has internal linkage (anonymous namespace), so FlashAttention's
// instantiations for these Ops are private to their TU and its ISA flags: no inline function
// compiled with AVX-512 can be picked by the linker for a caller on an AVX2-only CPU.
#pragma once

#ifndef HP_ISA
#error "define HP_ISA and include simd_arch.h before attention_simd.h"
#endif

#include <algorithm>

#include "hp/kernels/cpu/attention_impl.h"

namespace hp::kernels::HP_ISA {
namespace {

using A = Arch;
using V = A::V;
constexpr int W = A::W;

// C[MR, W·NV] (+)= A[MR, K] · B[K, W·NV] in MR·NV accumulator registers, plus NV for the row of
// B and one broadcast. kATrans selects how A is walked: rows contiguous (rsa == 1, the
// transposed-probability case: the MR values of column k are adjacent) or columns contiguous
// (csa == 1, q/k/v rows read in place).
template <int MR, int NV, bool kATrans>
inline void micro_tile(int64_t K, const float* a, int64_t rsa, int64_t csa, const float* b,
                       int64_t ldb, float* c, int64_t ldc, bool acc) {
  V r[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) r[i][v] = acc ? A::load(c + i * ldc + W * v) : A::set1(0.0f);
  const float* ap[MR];
  for (int i = 0; i < MR; ++i) ap[i] = a + i * rsa;
  for (int64_t k = 0; k < K; ++k) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = A::load(b + k * ldb + W * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V ai = A::set1(kATrans ? a[k * csa + i] : ap[i][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = A::fma(ai, bv[v], r[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) A::store(c + i * ldc + W * v, r[i][v]);
}

// One strip of NV vectors: panels of MR rows, the last one (M % MR rows) by a shorter tile.
template <int MR, int NV, bool kATrans>
void strip(int64_t M, int64_t K, const float* a, int64_t rsa, int64_t csa, const float* b,
           int64_t ldb, float* c, int64_t ldc, bool acc) {
  int64_t m0 = 0;
  for (; m0 + MR <= M; m0 += MR)
    micro_tile<MR, NV, kATrans>(K, a + m0 * rsa, rsa, csa, b, ldb, c + m0 * ldc, ldc, acc);
  if constexpr (MR > 1)
    if (m0 < M)
      strip<MR - 1, NV, kATrans>(M - m0, K, a + m0 * rsa, rsa, csa, b, ldb, c + m0 * ldc, ldc,
                                 acc);
}

// Column strips of NV vectors outermost: one strip of B ([K, NV·W], <= 16 KiB for K = 64) stays
// in L1 while the row panels of A stream past it; the last strip has the remaining nv < NV
// vectors.
template <int MR, int NV, bool kATrans>
void strips(int64_t M, int64_t N, int64_t K, const float* a, int64_t rsa, int64_t csa,
            const float* b, int64_t ldb, float* c, int64_t ldc, bool acc) {
  int64_t n0 = 0;
  for (; n0 + NV * W <= N; n0 += NV * W)
    strip<MR, NV, kATrans>(M, K, a, rsa, csa, b + n0, ldb, c + n0, ldc, acc);
  if constexpr (NV > 1)
    if (n0 < N)
      strips<MR, NV - 1, kATrans>(M, N - n0, K, a, rsa, csa, b + n0, ldb, c + n0, ldc, acc);
}

template <int MR, int NV>
struct SimdOps {
  static constexpr int64_t kLanes = W;

  static void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t rsa, int64_t csa,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool acc) {
    if (rsa == 1 && csa != 1)
      strips<MR, NV, true>(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
    else
      strips<MR, NV, false>(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
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

void exp2_array(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) A::store(y + i, vec_exp2<A>(A::load(x + i)));
  if (i < n) {
    float tmp[W] = {};
    std::copy(x + i, x + n, tmp);
    A::store(tmp, vec_exp2<A>(A::load(tmp)));
    std::copy(tmp, tmp + (n - i), y + i);
  }
}

// This ISA's entry points with MR×NV register tiles.
template <int MR, int NV>
const detail::AttentionKernels& attention_kernels() {
  using Flash = detail::FlashAttention<SimdOps<MR, NV>>;
  static constexpr detail::AttentionKernels k{&Flash::forward, &Flash::backward, &exp2_array};
  return k;
}

}  // namespace
}  // namespace hp::kernels::HP_ISA
