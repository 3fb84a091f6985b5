// FlashAttention-2 style blocked forward and backward, written once over an `Ops` policy that
// supplies the two hot primitives (a small GEMM and a tile exp2). attention.cpp instantiates it
// with scalar Ops, attention_avx2.cpp / attention_avx512.cpp with the SIMD Ops of
// attention_simd.h; everything here is a member of a class template whose Ops type has internal
// linkage, so the instantiations (compiled with different ISA flags) never share a symbol.
//
// Blocking: 64 queries × 64 keys. Scores are kept in base-2 units (scale · log2 e folded in) so the
// softmax needs exp2 only. Orientation is chosen so that every operand a block product reads is
// either used in place (a "broadcast" operand with any strides, or a row-major operand with d
// contiguous) or packed once per work item, never once per (q-block, kv-block) pair:
//   forward:   Sᵀ[kv, q] = K · (c·Q)ᵀ  (Qᵀ packed per item); softmax statistics run down columns,
//              so max and sum are vertical (SIMD-friendly) and O += (Pᵀ)ᵀ · V reads Pᵀ in place
//   backward:  S[q, kv] = Q · Kᵀ, dP = dO · Vᵀ (Kᵀ, Vᵀ packed once per kv block), then
//              dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K, reading P and dS in place (transposed
//              where needed)
// Ops contract (L = Ops::kLanes, the vector width in floats: 8 for AVX2 and the scalar Ops,
// 16 for AVX-512; a divisor of the 64-wide block):
//   gemm(M, N, K, a, rsa, csa, b, ldb, c, ldc, acc): C[M,N] (+)= A[M,K] · B[K,N], A[i,k] at
//     a[i·rsa + k·csa], B row-major (ldb), C row-major (ldc), N a multiple of L.
//   exp2_tile(s, ld, M, N, mul, row_sub, col_sub, col_sum): s[r,c] = exp2(mul·s[r,c] - row_sub[r]
//     - col_sub[c]) (null subtrahends are 0); if col_sum, col_sum[c] = Σ_r s[r,c]. N % L == 0.
// Every GEMM width the template passes (query / key counts of a block, the head dim) is padded
// to a multiple of L with zero columns, so the kernels never handle a partial vector.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/attention.h"
#include "hp/kernels/registry.h"

namespace hp::kernels::detail {

template <class T>
struct HeadsView {
  T* data;
  AttentionStrides s;
  T* row(int64_t b, int64_t h, int64_t t) const { return data + b * s.b + h * s.h + t * s.t; }
};

// A validated f32 problem (attention.cpp checks and resolves the scale).
struct AttentionF32Args {
  AttentionShape shape;
  bool causal;
  int64_t window;         // sliding window (causal only), 0: none
  const float* sinks;     // [Hq] sink logits (natural log) or null
  AttentionSegments seg;  // seg.q null: no document segments
  float scale;
  HeadsView<const float> q, k, v, o, dout;  // o, dout: backward only
  HeadsView<float> out, dq, dk, dv;         // out: forward only; dq, dk, dv: backward only
  float* lse_out;                           // [B, Hq, T], forward
  const float* lse;                         // [B, Hq, T], backward
  const float* dlse;                        // [B, Hq, T] lse gradient, backward, or null
  float* dsinks;                            // [Hq], backward with sinks, else null
};

// The entry points of one ISA's kernels, a kernel family of registry.h (attention_simd.h builds
// the SIMD ones, attention.cpp the scalar ones).
struct AttentionKernels {
  void (*forward)(const AttentionF32Args& a);
  void (*backward)(const AttentionF32Args& a);
  void (*exp2)(const float* x, float* y, int64_t n);  // the softmax's exp2, for its accuracy test
};

}  // namespace hp::kernels::detail

namespace hp::kernels {
HP_KERNEL_FAMILY(detail::AttentionKernels);
}  // namespace hp::kernels

namespace hp::kernels::detail {

template <class Ops>
struct FlashAttention {
  static constexpr int64_t kBlock = 64;
  static constexpr float kLog2e = 1.44269504088896340736f;
  static constexpr float kLn2 = 0.69314718055994530942f;

  // n T of scratch, the first `zeroed` of them zero (all by default; the rest uninitialized: the
  // work items' block buffers are written before they are read, and zeroing 66–150 KB per item
  // cost ~4% of a short-sequence attention). Not std::vector: its inline members, instantiated in
  // an ISA TU, can be emitted there as weak symbols compiled with that TU's flags (AVX-512 in
  // attention_avx512.cpp), and the linker may pick that copy for every caller, on CPUs without
  // the ISA too. A member class of FlashAttention<Ops> has the internal linkage of its TU's Ops.
  template <class T>
  class Zeroed {
   public:
    explicit Zeroed(int64_t n) : p_(new T[static_cast<size_t>(n)]()) {}
    Zeroed(int64_t n, int64_t zeroed) : p_(new T[static_cast<size_t>(n)]) {
      std::fill(p_, p_ + zeroed, T(0));
    }
    ~Zeroed() { delete[] p_; }
    Zeroed(const Zeroed&) = delete;
    Zeroed& operator=(const Zeroed&) = delete;
    T* data() const { return p_; }
    T& operator[](int64_t i) const { return p_[i]; }

   private:
    T* p_;
  };

  static constexpr int64_t kLanes = Ops::kLanes;
  static_assert(kLanes > 0 && kBlock % kLanes == 0, "the block must be whole vectors");
  // n rounded up to whole vectors (the padded GEMM widths, see the Ops contract).
  static int64_t pad(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }
  static int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

  // dst[d, c] = mul · src[c, d] for c < n ([D, 64]); columns >= n stay as they are (zero).
  static void pack_transposed(const float* src, int64_t ld, int64_t n, int64_t D, float mul,
                              float* dst) {
    for (int64_t c = 0; c < n; ++c)
      for (int64_t d = 0; d < D; ++d) dst[d * kBlock + c] = mul * src[c * ld + d];
  }

  // A row-major [n, D] operand as a GEMM B operand with its width padded to Dp = pad(D): in
  // place when D is whole vectors, else copied into `pack` ([64, Dp], padding zero).
  static const float* rows_b(const float* src, int64_t ld, int64_t n, int64_t D, float* pack,
                             int64_t& ldb) {
    if (D % kLanes == 0) {
      ldb = ld;
      return src;
    }
    const int64_t Dp = pad(D);
    for (int64_t r = 0; r < n; ++r) std::copy(src + r * ld, src + r * ld + D, pack + r * Dp);
    ldb = Dp;
    return pack;
  }

  // Causal mask on a [q, kv] tile: s[r, c] = value where key k0 + c > query q0 + r.
  static void mask_cols_ahead(float* s, int64_t M, int64_t N, int64_t q_minus_k, float value) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = std::max<int64_t>(0, r + q_minus_k + 1); c < N; ++c)
        s[r * kBlock + c] = value;
  }
  // Causal mask on a [kv, q] tile: s[r, c] = value where key k0 + r > query q0 + c.
  static void mask_rows_ahead(float* s, int64_t M, int64_t N, int64_t q_minus_k, float value) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < std::min(N, r - q_minus_k); ++c) s[r * kBlock + c] = value;
  }

  // Window mask on a [kv, q] tile: s[r, c] = value where query q0 + c − key k0 + r >= window.
  static void mask_rows_behind(float* s, int64_t M, int64_t N, int64_t q_minus_k, int64_t window,
                               float value) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = std::max<int64_t>(0, r + window - q_minus_k); c < N; ++c)
        s[r * kBlock + c] = value;
  }
  // Window mask on a [q, kv] tile: s[r, c] = value where query q0 + r − key k0 + c >= window.
  static void mask_cols_behind(float* s, int64_t M, int64_t N, int64_t q_minus_k, int64_t window,
                               float value) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < std::min(N, r + q_minus_k - window + 1); ++c) s[r * kBlock + c] = value;
  }

  // Segment mask on a [kv, q] tile: s[r, c] = value where key r and query c (c < N) differ.
  static void mask_rows_segments(float* s, int64_t M, int64_t N, const int32_t* seg_kv,
                                 const int32_t* seg_q, float value) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c)
        if (seg_kv[r] != seg_q[c]) s[r * kBlock + c] = value;
  }
  // Segment mask on a [q, kv] tile: s[r, c] = value where query r and key c (c < N) differ.
  static void mask_cols_segments(float* s, int64_t M, int64_t N, const int32_t* seg_q,
                                 const int32_t* seg_kv, float value) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c)
        if (seg_q[r] != seg_kv[c]) s[r * kBlock + c] = value;
  }
  // Whether queries sq[0, nq) and keys sk[0, nk) are all one document (ids are non-decreasing,
  // so the ends decide).
  static bool one_segment(const int32_t* sq, int64_t nq, const int32_t* sk, int64_t nk) {
    return sq[0] == sq[nq - 1] && sk[0] == sk[nk - 1] && sq[0] == sk[0];
  }

  static void forward(const AttentionF32Args& a) {
    const AttentionShape& sh = a.shape;
    const int64_t D = sh.head_dim, Dp = pad(D), group = sh.heads_q / sh.heads_kv;
    const int64_t T = sh.seq_q, Tkv = sh.seq_kv, nqb = blocks(T), bh = sh.batch * sh.heads_q;
    const float c2 = a.scale * kLog2e;
    // Items in descending q-block order: under the causal mask the last blocks cost the most, and
    // the pool hands items out dynamically, so heavy-first balances the threads.
    parallel_blocks(nqb * bh, 1, [&](int64_t item, int64_t, int64_t) {
      const int64_t qb = nqb - 1 - item / bh, b = (item % bh) / sh.heads_q;
      const int64_t h = item % sh.heads_q, hk = h / group;
      const int64_t q0 = qb * kBlock, nq = std::min(kBlock, T - q0), nqp = pad(nq);
      // Zero: qt (its padding columns), acc and l (accumulated), vpack when used (its padding).
      const int64_t zeroed = D * kBlock + kBlock * Dp + kBlock + (D % kLanes ? kBlock * Dp : 0);
      Zeroed<float> buf(D * kBlock + kBlock * kBlock + 2 * kBlock * Dp + 4 * kBlock, zeroed);
      float* qt = buf.data();            // [D, 64]: c2 · qᵀ
      float* acc = qt + D * kBlock;      // [64 q, Dp]: unnormalized output
      float* l = acc + kBlock * Dp;      // [64]: running column sum
      float* vpack = l + kBlock;         // [64 kv, Dp]: v when D % L != 0
      float* s = vpack + kBlock * Dp;    // [64 kv, 64 q]: scores, then probabilities
      float* m = s + kBlock * kBlock;    // [64]: running column max (base 2)
      float* alpha = m + kBlock;         // [64]: rescale of the previous sum
      float* csum = alpha + kBlock;      // [64]: this block's column sum
      pack_transposed(a.q.row(b, h, q0), a.q.s.t, nq, D, c2, qt);
      std::fill(m, m + kBlock, -FLT_MAX);
      // Keys before the window of the block's first query are masked for all of its queries.
      int64_t k_begin = a.window > 0 ? std::max<int64_t>(0, q0 - a.window + 1) : 0;
      int64_t k_end = a.causal ? std::min(Tkv, q0 + nq) : Tkv;
      const int32_t* sq = a.seg.q ? a.seg.q + b * a.seg.q_stride + q0 : nullptr;  // [nq]
      const int32_t* sk = a.seg.q ? a.seg.kv + b * a.seg.kv_stride : nullptr;     // [Tkv]
      if (sq && k_begin < k_end) {
        // Keys of documents before the block's first query or after its last are all masked.
        k_begin = std::lower_bound(sk + k_begin, sk + k_end, sq[0]) - sk;
        k_end = std::upper_bound(sk + k_begin, sk + k_end, sq[nq - 1]) - sk;
      }
      for (int64_t k0 = k_begin; k0 < k_end; k0 += kBlock) {
        const int64_t nk = std::min(kBlock, k_end - k0);
        Ops::gemm(nk, nqp, D, a.k.row(b, hk, k0), a.k.s.t, 1, qt, kBlock, s, kBlock, false);
        if (a.causal && k0 + nk - 1 > q0) mask_rows_ahead(s, nk, nqp, q0 - k0, -INFINITY);
        if (a.window > 0 && q0 + nq - 1 - k0 >= a.window)
          mask_rows_behind(s, nk, nqp, q0 - k0, a.window, -INFINITY);
        if (sq && !one_segment(sq, nq, sk + k0, nk))
          mask_rows_segments(s, nk, nq, sk + k0, sq, -INFINITY);
        std::copy(m, m + kBlock, alpha);
        for (int64_t r = 0; r < nk; ++r)
          for (int64_t c = 0; c < nqp; ++c) m[c] = std::max(m[c], s[r * kBlock + c]);
        Ops::exp2_tile(alpha, 0, 1, nqp, 1.0f, nullptr, m, nullptr);
        Ops::exp2_tile(s, kBlock, nk, nqp, 1.0f, nullptr, m, csum);
        for (int64_t c = 0; c < nqp; ++c) l[c] = l[c] * alpha[c] + csum[c];
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t d = 0; d < Dp; ++d) acc[i * Dp + d] *= alpha[i];
        int64_t ldv = 0;
        const float* vb = rows_b(a.v.row(b, hk, k0), a.v.s.t, nk, D, vpack, ldv);
        Ops::gemm(nq, Dp, nk, s, 1, kBlock, vb, ldv, acc, Dp, true);
      }
      float* lse = a.lse_out + (b * sh.heads_q + h) * T + q0;
      for (int64_t i = 0; i < nq; ++i) {
        float* o = a.out.row(b, h, q0 + i);
        if (a.sinks) {
          // The sink joins the denominator: with M = max(m, z), L = l·2^(m−M) + 2^(z−M) (base 2).
          const float z = a.sinks[h] * kLog2e, mx = std::max(m[i], z);
          const float keep = std::exp2(m[i] - mx), sum = l[i] * keep + std::exp2(z - mx);
          const float mul = keep / sum;
          for (int64_t d = 0; d < D; ++d) o[d] = acc[i * Dp + d] * mul;
          lse[i] = (mx + std::log2(sum)) * kLn2;
          continue;
        }
        if (l[i] == 0.0f) {  // segments hid every key: no attention output, no probability mass
          std::fill(o, o + D, 0.0f);
          lse[i] = -INFINITY;
          continue;
        }
        const float inv = 1.0f / l[i];
        for (int64_t d = 0; d < D; ++d) o[d] = acc[i * Dp + d] * inv;
        lse[i] = (m[i] + std::log2(l[i])) * kLn2;
      }
    });
  }

  static void backward(const AttentionF32Args& a) {
    const AttentionShape& sh = a.shape;
    const int64_t B = sh.batch, Hq = sh.heads_q, T = sh.seq_q, D = sh.head_dim;
    // delta[b, h, t] = Σ_d do·o − dlse and lse2 = lse · log2 e, both [B, Hq, T]; with sinks,
    // sink_part[b, h] = −Σ_t e^{z_h − lse} · delta (summed over b in order below).
    Zeroed<float> delta(B * Hq * T), lse2(B * Hq * T);
    Zeroed<double> sink_part(a.dsinks ? B * Hq : 0);
    parallel_blocks(B * Hq, 1, [&](int64_t bh, int64_t, int64_t) {
      const int64_t b = bh / Hq, h = bh % Hq;
      // Σ_d in double in d order per row, kRows rows side by side: each row's sum is a chain of
      // dependent adds (latency-bound alone); independent chains overlap, each in its own order.
      constexpr int64_t kRows = 8;
      double row_sum[kRows];
      for (int64_t t = 0; t < T; ++t) {
        const int64_t j = t % kRows;
        if (j == 0) {
          const int64_t rows = std::min(kRows, T - t);
          const float* o[kRows];
          const float* g[kRows];
          for (int64_t r = 0; r < rows; ++r) {
            o[r] = a.o.row(b, h, t + r);
            g[r] = a.dout.row(b, h, t + r);
            row_sum[r] = 0;
          }
          for (int64_t d = 0; d < D; ++d)
            for (int64_t r = 0; r < rows; ++r) row_sum[r] += static_cast<double>(o[r][d]) * g[r][d];
        }
        double sum = row_sum[j];
        if (a.dlse) sum -= a.dlse[bh * T + t];
        delta[bh * T + t] = static_cast<float>(sum);
        lse2[bh * T + t] = a.lse[bh * T + t] * kLog2e;
        if (a.dsinks) sink_part[bh] -= std::exp(double(a.sinks[h]) - a.lse[bh * T + t]) * sum;
      }
    });
    if (a.dsinks)
      for (int64_t h = 0; h < Hq; ++h) {
        double sum = 0;
        for (int64_t b = 0; b < B; ++b) sum += sink_part[b * Hq + h];
        a.dsinks[h] = static_cast<float>(sum);
      }
    fused_pass(a, delta.data(), lse2.data());
  }

  // Number of dq partial sums per (b, q head): enough items for kParallelTarget work items in
  // the fused pass. It depends on the shape only, never on the thread count, so the result does not
  // either.
  static constexpr int64_t kParallelTarget = 16;
  static int64_t dq_chunks(const AttentionShape& sh) {
    const int64_t bh = sh.batch * sh.heads_kv;
    return std::clamp<int64_t>((kParallelTarget + bh - 1) / bh, 1,
                               std::max<int64_t>(1, blocks(sh.seq_kv)));
  }

  // One pass, five block products per (q block, kv block) pair as in FlashAttention-2, without
  // atomics. Item (b, kv head, chunk c) owns kv blocks kb ≡ c (mod C) — round-robin, so causal
  // chunks cost about the same — and for each, loops the group's q heads and the q blocks that see
  // it in a fixed order: dk, dv are complete per kv block; dq contributions go to the chunk's own
  // partial buffer part[c] ([C, B, Hq, T, Dp]), which a last pass sums in chunk order.
  static void fused_pass(const AttentionF32Args& a, const float* delta, const float* lse2) {
    const AttentionShape& sh = a.shape;
    const int64_t Hq = sh.heads_q, Hkv = sh.heads_kv, group = Hq / Hkv;
    const int64_t T = sh.seq_q, Tkv = sh.seq_kv, D = sh.head_dim, Dp = pad(D);
    const int64_t nqb = blocks(T), nkb = blocks(Tkv), C = dq_chunks(sh);
    const int64_t head_stride = T * Dp, chunk_stride = sh.batch * Hq * head_stride;
    const float c2 = a.scale * kLog2e;
    Zeroed<float> part(C * chunk_stride);
    parallel_blocks(C * sh.batch * Hkv, 1, [&](int64_t item, int64_t, int64_t) {
      const int64_t c = item % C, b = item / C / Hkv, hk = item / C % Hkv;
      // Zero: the packs when used (their padding columns); kt, vt, dk, dv are zeroed per kv block.
      Zeroed<float> buf(2 * D * kBlock + 2 * kBlock * kBlock + 5 * kBlock * Dp,
                        D % kLanes ? 3 * kBlock * Dp : 0);
      float* qpack = buf.data();           // [64 q, Dp]: q when D % L != 0
      float* gpack = qpack + kBlock * Dp;  // [64 q, Dp]: do when D % L != 0
      float* kpack = gpack + kBlock * Dp;  // [64 kv, Dp]: k when D % L != 0
      float* kt = kpack + kBlock * Dp;     // [D, 64]: kᵀ
      float* vt = kt + D * kBlock;         // [D, 64]: vᵀ
      float* dk = vt + D * kBlock;         // [64 kv, Dp]
      float* dv = dk + kBlock * Dp;        // [64 kv, Dp]
      float* p = dv + kBlock * Dp;         // [64 q, 64 kv]: scores, then probabilities
      float* ds = p + kBlock * kBlock;     // [64 q, 64 kv]: dP, then dS
      for (int64_t kb = c; kb < nkb; kb += C) {
        const int64_t k0 = kb * kBlock, nk = std::min(kBlock, Tkv - k0), nkp = pad(nk);
        const float* k = a.k.row(b, hk, k0);
        std::fill(kt, kt + 2 * D * kBlock, 0.0f);
        std::fill(dk, dk + 2 * kBlock * Dp, 0.0f);
        pack_transposed(k, a.k.s.t, nk, D, 1.0f, kt);
        pack_transposed(a.v.row(b, hk, k0), a.v.s.t, nk, D, 1.0f, vt);
        int64_t ldk = 0;
        const float* kbp = rows_b(k, a.k.s.t, nk, D, kpack, ldk);
        // The q blocks that see this kv block: from its diagonal (causal) and, with segments,
        // only those holding queries of the block's documents.
        // With a window, queries past k0 + nk − 1 + window − 1 see none of its keys.
        int64_t qb_begin = a.causal ? k0 / kBlock : 0, qb_end = nqb;
        if (a.window > 0) qb_end = blocks(std::min(T, k0 + nk - 1 + a.window));
        const int32_t* sq = a.seg.q ? a.seg.q + b * a.seg.q_stride : nullptr;         // [T]
        const int32_t* sk = a.seg.q ? a.seg.kv + b * a.seg.kv_stride + k0 : nullptr;  // [nk]
        if (sq) {
          qb_begin = std::max(qb_begin, (std::lower_bound(sq, sq + T, sk[0]) - sq) / kBlock);
          qb_end = std::min(qb_end, blocks(std::upper_bound(sq, sq + T, sk[nk - 1]) - sq));
        }
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          const float* lse2_h = lse2 + (b * Hq + h) * T;
          const float* delta_h = delta + (b * Hq + h) * T;
          float* dq_h = part.data() + c * chunk_stride + (b * Hq + h) * head_stride;
          for (int64_t qb = qb_begin; qb < qb_end; ++qb) {
            const int64_t q0 = qb * kBlock, nq = std::min(kBlock, T - q0);
            const float* q = a.q.row(b, h, q0);
            const float* g = a.dout.row(b, h, q0);
            Ops::gemm(nq, nkp, D, q, a.q.s.t, 1, kt, kBlock, p, kBlock, false);
            Ops::gemm(nq, nkp, D, g, a.dout.s.t, 1, vt, kBlock, ds, kBlock, false);
            Ops::exp2_tile(p, kBlock, nq, nkp, c2, lse2_h + q0, nullptr, nullptr);
            if (a.causal && k0 + nk - 1 > q0) mask_cols_ahead(p, nq, nkp, q0 - k0, 0.0f);
            if (a.window > 0 && q0 + nq - 1 - k0 >= a.window)
              mask_cols_behind(p, nq, nkp, q0 - k0, a.window, 0.0f);
            // (Also zeroes the exp2(+inf) of queries whose lse is -inf: they see no key.)
            if (sq && !one_segment(sq + q0, nq, sk, nk))
              mask_cols_segments(p, nq, nk, sq + q0, sk, 0.0f);
            for (int64_t r = 0; r < nq; ++r)
              for (int64_t j = 0; j < nkp; ++j)
                ds[r * kBlock + j] = p[r * kBlock + j] * (ds[r * kBlock + j] - delta_h[q0 + r]);
            int64_t ldg = 0, ldq = 0;
            const float* gb = rows_b(g, a.dout.s.t, nq, D, gpack, ldg);
            const float* qbp = rows_b(q, a.q.s.t, nq, D, qpack, ldq);
            Ops::gemm(nk, Dp, nq, p, 1, kBlock, gb, ldg, dv, Dp, true);
            Ops::gemm(nk, Dp, nq, ds, 1, kBlock, qbp, ldq, dk, Dp, true);
            Ops::gemm(nq, Dp, nk, ds, kBlock, 1, kbp, ldk, dq_h + q0 * Dp, Dp, true);
          }
        }
        for (int64_t r = 0; r < nk; ++r) {
          float* dk_out = a.dk.row(b, hk, k0 + r);
          float* dv_out = a.dv.row(b, hk, k0 + r);
          for (int64_t d = 0; d < D; ++d) {
            dk_out[d] = a.scale * dk[r * Dp + d];
            dv_out[d] = dv[r * Dp + d];
          }
        }
      }
    });
    // dq = scale · Σ_c part[c], chunks in index order.
    parallel_blocks(sh.batch * Hq, 1, [&](int64_t bh, int64_t, int64_t) {
      const int64_t b = bh / Hq, h = bh % Hq;
      for (int64_t t = 0; t < T; ++t) {
        float* out = a.dq.row(b, h, t);
        const float* src = part.data() + bh * head_stride + t * Dp;
        for (int64_t d = 0; d < D; ++d) out[d] = src[d];
        for (int64_t cc = 1; cc < C; ++cc)
          for (int64_t d = 0; d < D; ++d) out[d] += src[cc * chunk_stride + d];
        for (int64_t d = 0; d < D; ++d) out[d] *= a.scale;
      }
    });
  }
};

}  // namespace hp::kernels::detail
