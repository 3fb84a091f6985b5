// MegaGate's selection (gate_topk.h), written once against the kernels' SIMD Arch; included by
// gate_topk_scalar.cpp and gate_topk_avx2.cpp after each defines HP_ISA. Plain arrays only (no
// std containers: see simd_arch.h).
#pragma once

#ifndef HP_ISA
#error "define HP_ISA (the ISA namespace) before including gate_topk_impl.h"
#endif

#include <cstdint>

#include "hp/kernels/cpu/ew_ops.h"
#include "hp/kernels/cpu/simd_arch.h"
#include "hp/kernels/cpu/gate_topk.h"

namespace hp::kernels::HP_ISA {

using A = kernels::HP_ISA::Arch;
using V = A::V;
using M = A::M;
constexpr int W = A::W;
constexpr float kNegInf = -__builtin_inff();

// Lanes of a comparison as bits (lane i → bit i); OR of two comparisons.
#if defined(__AVX2__)
inline unsigned mask_bits(M m) { return unsigned(_mm256_movemask_ps(m)); }
inline M mask_or(M a, M b) { return _mm256_or_ps(a, b); }
#else
inline unsigned mask_bits(M m) { return m ? 1u : 0u; }
inline M mask_or(M a, M b) { return a || b; }
#endif

// The k largest values pushed (with their indices), descending; ties keep the earlier push first.
// By insertion: one compare per value once k are held, which beats sorting for k << n.
struct TopK {
  int64_t k, held = 0;
  int64_t* idx;
  float* val;
  void push(float x, int64_t j) {
    if (held == k && !(x > val[k - 1])) return;
    int64_t pos = held < k ? held++ : k - 1;
    for (; pos > 0 && x > val[pos - 1]; --pos) {
      val[pos] = val[pos - 1];
      idx[pos] = idx[pos - 1];
    }
    val[pos] = x;
    idx[pos] = j;
  }
};

// Scalar top-2 update: the two largest of (t1 >= t2) and x, with std::max / std::min's operand
// rules (a NaN x is ignored), as the original kernel.
inline void push2(float& t1, float& t2, float x) {
  const float lo = x < t1 ? x : t1;
  t2 = t2 < lo ? lo : t2;
  t1 = t1 < x ? x : t1;
}
// Lane-wise: (m1 >= m2) per lane, x inserted.
inline void push2_lanes(V& m1, V& m2, V x) {
  m2 = A::max(m2, A::min(m1, x));
  m1 = A::max(m1, x);
}
// Lane-wise merge of two lane top-2s (each lane's sets disjoint): the top-2 of the union.
inline void merge2(V& m1, V& m2, V b1, V b2) {
  const V lo = A::min(m1, b1);
  m1 = A::max(m1, b1);
  m2 = A::max(lo, A::max(m2, b2));
}
// The top-2 of all 2·W values of the lane top-2s (m1, m2).
inline void lanes_top2(V m1, V m2, float& t1, float& t2) {
#if defined(__AVX2__)
  // Each lane merged with lane ^4, ^2, ^1: disjoint sets each time, every lane ends with all.
  merge2(m1, m2, _mm256_permute2f128_ps(m1, m1, 1), _mm256_permute2f128_ps(m2, m2, 1));
  merge2(m1, m2, _mm256_shuffle_ps(m1, m1, 0x4E), _mm256_shuffle_ps(m2, m2, 0x4E));
  merge2(m1, m2, _mm256_shuffle_ps(m1, m1, 0xB1), _mm256_shuffle_ps(m2, m2, 0xB1));
  t1 = _mm256_cvtss_f32(m1);
  t2 = _mm256_cvtss_f32(m2);
#else
  t1 = m1;
  t2 = m2;
#endif
}

// The k-th largest of v [n] (k <= n, no NaN) as a multiset: the largest v_i with at least k
// values >= it. Counting instead of sorting: no data-dependent branch.
inline float kth_largest(const float* v, int64_t n, int64_t k) {
  float best = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    const V x = A::set1(v[i]);
    int64_t at_least = 0, j = 0;
    for (; j + W <= n; j += W)
      at_least += __builtin_popcount(mask_bits(A::ge(A::load(v + j), x)));
    for (; j < n; ++j) at_least += v[j] >= v[i];
    best = at_least >= k && v[i] > best ? v[i] : best;
  }
  return best;
}

// Inserts c[j] for j in [lo, hi) with c[j] >= tau, in index order (rows wider than
// kMaxCandidates).
inline void push_at_least(const float* c, int64_t lo, int64_t hi, float tau, TopK& top) {
  const V t = A::set1(tau);
  int64_t j = lo;
  for (; j + W <= hi; j += W) {
    for (unsigned b = mask_bits(A::ge(A::load(c + j), t)); b != 0; b &= b - 1) {
      const int64_t i = j + __builtin_ctz(b);
      top.push(c[i], i);
    }
  }
  for (; j < hi; ++j)
    if (c[j] >= tau) top.push(c[j], j);
}

// The values that passed a bound, in index order, with their indices; W spare slots for whole-
// vector stores.
constexpr int64_t kMaxCandidates = 512;
struct Candidates {
  float v[kMaxCandidates + W];
  int32_t i[kMaxCandidates + W];
  int64_t n = 0;
};

#if defined(__AVX2__)
// x rotated by s lanes: lane q holds x[(q + s) mod 8].
inline V rotate(V x, int s) {
  const __m256i q = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_permutevar8x32_ps(
      x, _mm256_and_si256(_mm256_add_epi32(q, _mm256_set1_epi32(s)), _mm256_set1_epi32(7)));
}

// kth_largest of the 2·W values of a and b (k <= 2·W, no NaN), counted by lane rotations: each
// value's count of values >= it, then the largest value whose count reaches k.
inline float kth_largest2(V a, V b, int64_t k) {
  __m256i na = _mm256_setzero_si256(), nb = na;  // - counts (masks count -1)
  for (int s = 0; s < W; ++s) {
    const V oa = rotate(a, s), ob = rotate(b, s);
    na = _mm256_add_epi32(na, _mm256_castps_si256(A::ge(oa, a)));
    na = _mm256_add_epi32(na, _mm256_castps_si256(A::ge(ob, a)));
    nb = _mm256_add_epi32(nb, _mm256_castps_si256(A::ge(oa, b)));
    nb = _mm256_add_epi32(nb, _mm256_castps_si256(A::ge(ob, b)));
  }
  const __m256i above = _mm256_set1_epi32(int32_t(-k + 1));  // count >= k: -count < -k + 1
  const V qa = A::select(_mm256_castsi256_ps(_mm256_cmpgt_epi32(above, na)), a, A::set1(kNegInf));
  const V qb = A::select(_mm256_castsi256_ps(_mm256_cmpgt_epi32(above, nb)), b, A::set1(kNegInf));
  return A::hmax(A::max(qa, qb));
}

// Lanes q >= 8 - s: after a rotation by s, those hold an element from an earlier position.
inline V wrapped(int s) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                _mm256_set1_epi32(7 - s)));
}

// For each 8-bit lane mask, the lanes set, first (the permutation packing them to the front).
struct PackTable {
  int32_t lanes[256][8];
};
constexpr PackTable make_pack_table() {
  PackTable t{};
  for (int m = 0; m < 256; ++m)
    for (int i = 0, n = 0; i < 8; ++i)
      if ((m >> i) & 1) t.lanes[m][n++] = i;
  return t;
}
inline constexpr PackTable kPack = make_pack_table();
// Appends the lanes of x = c[j, j + 8) set in `bits` at cd.v / cd.i + n, packed, without a
// branch. The count n is the caller's local: cd.n in memory would be reloaded after each vector
// store (which may alias it), a store-to-load chain through every append.
inline void append(V x, int64_t j, unsigned bits, Candidates& cd, int64_t& n) {
  const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kPack.lanes[bits]));
  _mm256_storeu_ps(cd.v + n, _mm256_permutevar8x32_ps(x, p));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(cd.i + n),
                      _mm256_add_epi32(p, _mm256_set1_epi32(int32_t(j))));
  n += __builtin_popcount(bits);
}
#else
inline void append(V x, int64_t j, unsigned bits, Candidates& cd, int64_t& n) {
  cd.v[n] = x;
  cd.i[n] = int32_t(j);
  n += bits;
}
#endif

// Appends c[j] for j in [lo, hi) with c[j] >= tau.
inline void gather_at_least(const float* c, int64_t lo, int64_t hi, float tau, Candidates& cd) {
  const V t = A::set1(tau);
  int64_t j = lo, n = cd.n;
  for (; j + W <= hi; j += W) {
    const V x = A::load(c + j);
    append(x, j, mask_bits(A::ge(x, t)), cd, n);
  }
  for (; j < hi; ++j) {
    cd.v[n] = c[j];
    cd.i[n] = int32_t(j);
    n += c[j] >= tau;
  }
  cd.n = n;
}

#if defined(__AVX2__)
// select_candidates (below) for at most 2·W candidates, in registers: the same counts, each candidate's
// rank against all others at once by lane rotations (x = cd.v[0, 8), y = cd.v[8, 16), -inf past
// n: never ahead of a candidate, as they come after every one), then slot r of the output is the
// lane whose rank is r.
inline void select_few(Candidates& cd, int64_t k, const GateTopKScratch& w) {
  const int64_t n = cd.n;
  A::store(cd.v + n, A::set1(kNegInf));
  A::store(cd.v + n + W, A::set1(kNegInf));
  const V x = A::load(cd.v), y = A::load(cd.v + W);
  __m256i rx = _mm256_setzero_si256(), ry = rx;  // - ranks (masks count -1)
  const auto count = [](__m256i& r, V ahead) {
    r = _mm256_add_epi32(r, _mm256_castps_si256(ahead));
  };
  for (int s = 1; s < W; ++s) {  // within each vector: ahead when >= from before, > from after
    const V wr = wrapped(s), ox = rotate(x, s), oy = rotate(y, s);
    count(rx, A::select(wr, A::ge(ox, x), A::gt(ox, x)));
    count(ry, A::select(wr, A::ge(oy, y), A::gt(oy, y)));
  }
  if (n > W)
    for (int s = 0; s < W; ++s) {  // y's all come after x's
      count(rx, A::gt(rotate(y, s), x));
      count(ry, A::ge(rotate(x, s), y));
    }
  const unsigned live = unsigned((uint64_t(1) << n) - 1);
  for (int64_t r = 0; r < k; ++r) {
    const __m256i want = _mm256_set1_epi32(int32_t(-r));
    const unsigned bits =
        (mask_bits(_mm256_castsi256_ps(_mm256_cmpeq_epi32(rx, want))) |
         mask_bits(_mm256_castsi256_ps(_mm256_cmpeq_epi32(ry, want))) << W) & live;
    const int m = __builtin_ctz(bits);
    w.val[r] = cd.v[m];
    w.idx[r] = cd.i[m];
  }
}
#endif

// The top k of the candidates (at least k, no NaN) into w.idx / w.val. Few candidates: each one's
// rank in the order (value descending, index ascending) is counted — the number of candidates
// before it that are >= it plus those after it that are > it — and it is written to that slot if
// the rank is below k: no data-dependent branch. Many: the insertion, in index order.
inline void select_candidates(Candidates& cd, int64_t k, const GateTopKScratch& w) {
  const int64_t n = cd.n;
#if defined(__AVX2__)
  if (n <= 2 * W) return select_few(cd, k, w);
#endif
  if (n > 4 * W) {
    TopK top{k, 0, w.idx, w.val};
    for (int64_t m = 0; m < n; ++m) top.push(cd.v[m], cd.i[m]);
    return;
  }
  A::store(cd.v + n, A::set1(kNegInf));  // the last block's spare lanes: never counted
  float sorted_v[4 * W];  // the ranks are a permutation of [0, n): candidate m goes to its rank
  int32_t sorted_i[4 * W];
  for (int64_t m = 0; m < n; ++m) {
    const V x = A::set1(cd.v[m]);
    int64_t rank = 0;
    for (int64_t b = 0; b < n; b += W) {
      const V y = A::load(cd.v + b);
      const int64_t before = m - b < 0 ? 0 : m - b < W ? m - b : W;
      const unsigned lo = unsigned((uint64_t(1) << before) - 1);
      rank += __builtin_popcount((mask_bits(A::ge(y, x)) & lo) | (mask_bits(A::gt(y, x)) & ~lo));
    }
    sorted_v[rank] = cd.v[m];
    sorted_i[rank] = cd.i[m];
  }
  for (int64_t r = 0; r < k; ++r) {
    w.val[r] = sorted_v[r];
    w.idx[r] = sorted_i[r];
  }
}

// The top_k of c without groups. The lane-wise top-2s are 2·W distinct elements of the row (or
// -inf placeholders), so when k <= 2·W their k-th largest tau bounds the row's k-th largest from
// below: only values >= tau can be selected.
inline void select_plain(const float* c, const GateTopKShape& s, const GateTopKScratch& w,
                         TopK& top) {
  const int64_t e = s.experts, k = s.top_k;
  V m1 = A::set1(kNegInf), m2 = m1;
  M nan = A::isnan(m1);  // all false
  int64_t j = 0;
  for (; j + W <= e; j += W) {
    const V x = A::load(c + j);
    nan = mask_or(nan, A::isnan(x));
    push2_lanes(m1, m2, x);
  }
  bool tail_nan = false;
  for (; j < e; ++j) tail_nan = tail_nan || c[j] != c[j];
  if (mask_bits(nan) != 0 || tail_nan) {  // the original kernel's pass over every value
    for (j = 0; j < e; ++j) top.push(c[j], j);
    return;
  }
  float tau = kNegInf;
  if (k <= 2 * W) {
#if defined(__AVX2__)
    tau = kth_largest2(m1, m2, k);
#else
    float lanes[2 * W];
    A::store(lanes, m1);
    A::store(lanes + W, m2);
    tau = kth_largest(lanes, 2 * W, k);
#endif
  }
  if (e > kMaxCandidates) return push_at_least(c, 0, e, tau, top);
  Candidates cd;
  gather_at_least(c, 0, e, tau, cd);
  select_candidates(cd, k, w);
}

// Group-limited (gate.h): groups scored by the sum of their top-2, the topk_group best kept. The
// kept groups' top-2s are candidates themselves: when they number >= k, their k-th largest bounds
// the selection from below. A row holding a NaN takes the original kernel's steps exactly: scalar
// top-2s (NaN ignored), the bound (NaN never passes it), and when fewer than k values passed, the
// kept groups' every value.
inline void select_grouped(const float* c, const GateTopKShape& s, const GateTopKScratch& w,
                           TopK& top) {
  const int64_t per = s.experts / s.n_group, k = s.top_k;
  M nan = A::isnan(A::set1(0.0f));  // all false
  bool tail_nan = false;
  for (int64_t q = 0; q < s.n_group; ++q) {
    V m1 = A::set1(kNegInf), m2 = m1;
    int64_t j = q * per;
    for (; j + W <= (q + 1) * per; j += W) {
      const V x = A::load(c + j);
      nan = mask_or(nan, A::isnan(x));
      push2_lanes(m1, m2, x);
    }
    float t1, t2;
    lanes_top2(m1, m2, t1, t2);
    for (; j < (q + 1) * per; ++j) {
      tail_nan = tail_nan || c[j] != c[j];
      push2(t1, t2, c[j]);
    }
    w.top2[2 * q] = t1;
    w.top2[2 * q + 1] = t2;
  }
  if (mask_bits(nan) != 0 || tail_nan)
    for (int64_t q = 0; q < s.n_group; ++q) {
      float t1 = kNegInf, t2 = kNegInf;
      for (int64_t j = q * per; j < (q + 1) * per; ++j) push2(t1, t2, c[j]);
      w.top2[2 * q] = t1;
      w.top2[2 * q + 1] = t2;
    }
  TopK groups{s.topk_group, 0, w.gidx, w.gval};
  for (int64_t q = 0; q < s.n_group; ++q) groups.push(w.top2[2 * q] + w.top2[2 * q + 1], q);
  for (int64_t q = 0; q < s.n_group; ++q) w.keep[q] = 0;
  for (int64_t q = 0; q < s.topk_group; ++q) w.keep[w.gidx[q]] = 1;
  float tau = kNegInf;
  if (2 * s.topk_group >= k) {
    int64_t m = 0;
    for (int64_t q = 0; q < s.n_group; ++q)
      if (w.keep[q]) {
        w.kept2[m++] = w.top2[2 * q];
        w.kept2[m++] = w.top2[2 * q + 1];
      }
    tau = kth_largest(w.kept2, m, k);
  }
  if (s.experts <= kMaxCandidates) {
    Candidates cd;
    for (int64_t q = 0; q < s.n_group; ++q)
      if (w.keep[q]) gather_at_least(c, q * per, (q + 1) * per, tau, cd);
    if (cd.n >= k) return select_candidates(cd, k, w);
  } else {
    for (int64_t q = 0; q < s.n_group; ++q)
      if (w.keep[q]) push_at_least(c, q * per, (q + 1) * per, tau, top);
    if (top.held == k) return;
  }
  top.held = 0;  // only with NaN in the row
  for (int64_t q = 0; q < s.n_group; ++q)
    if (w.keep[q])
      for (int64_t j = q * per; j < (q + 1) * per; ++j) top.push(c[j], j);
}

#if defined(__AVX2__)
// The fast group-limited selection: groups of whole vectors, at most W of them, a row that fits
// the packed candidates (DeepSeek-V3: 8 groups of 32 of 256 experts).
inline bool grouped_fits_lanes(const GateTopKShape& s) {
  return s.n_group > 1 && s.n_group <= W && (s.experts / s.n_group) % W == 0 &&
         s.experts <= kMaxCandidates;
}

// Lane q of (t1, t2) = the top-2 of group q from its lane-wise top-2s (g1[q], g2[q]), for 8
// groups: a transposed merge tree (as Prims::reduce_lanes). Each merge joins disjoint lanes.
inline void groups_top2(const V* g1, const V* g2, V& t1, V& t2) {
  V a1[4], a2[4], b1[2], b2[2];
  for (int k = 0; k < 4; ++k) {  // lanes [q0 q1 q0 q1 | ...] of the pair (2k, 2k + 1)
    a1[k] = _mm256_unpacklo_ps(g1[2 * k], g1[2 * k + 1]);
    a2[k] = _mm256_unpacklo_ps(g2[2 * k], g2[2 * k + 1]);
    merge2(a1[k], a2[k], _mm256_unpackhi_ps(g1[2 * k], g1[2 * k + 1]),
           _mm256_unpackhi_ps(g2[2 * k], g2[2 * k + 1]));
  }
  for (int k = 0; k < 2; ++k) {  // lanes [q0 q1 q2 q3 | q0 q1 q2 q3] of groups 4k .. 4k + 3
    const auto lo = [](V x, V y) {
      return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
    };
    const auto hi = [](V x, V y) {
      return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
    };
    b1[k] = lo(a1[2 * k], a1[2 * k + 1]);
    b2[k] = lo(a2[2 * k], a2[2 * k + 1]);
    merge2(b1[k], b2[k], hi(a1[2 * k], a1[2 * k + 1]), hi(a2[2 * k], a2[2 * k + 1]));
  }
  t1 = _mm256_permute2f128_ps(b1[0], b1[1], 0x20);
  t2 = _mm256_permute2f128_ps(b2[0], b2[1], 0x20);
  merge2(t1, t2, _mm256_permute2f128_ps(b1[0], b1[1], 0x31),
         _mm256_permute2f128_ps(b2[0], b2[1], 0x31));
}

// The group-limited selection from each group's lane-wise top-2s g1 / g2 [n_group] of c (no NaN
// in c): the same experts in the same order as select_grouped. Returns false (nothing written)
// when a group score is NaN (+inf + -inf), which select_grouped's insertion orders its own way.
inline bool select_grouped_lanes(const float* c, const GateTopKShape& s, const GateTopKScratch& w,
                                 V* g1, V* g2) {
  const int64_t per = s.experts / s.n_group, k = s.top_k;
  for (int64_t q = s.n_group; q < W; ++q) g1[q] = g2[q] = A::set1(kNegInf);
  V t1, t2;
  groups_top2(g1, g2, t1, t2);
  const V gs = A::add(t1, t2);  // lane q: group q's score (-inf past n_group)
  if (mask_bits(A::isnan(gs)) != 0) return false;
  // Rank of each group in (score descending, group ascending) — the insertion's order: group
  // (q + r) mod 8 is ahead of q when its score is larger, or equal with a lower index (q >= 8 - r).
  __m256i rank = _mm256_setzero_si256();
  for (int r = 1; r < W; ++r) {
    const V o = rotate(gs, r);
    const V ahead = mask_or(A::gt(o, gs), _mm256_and_ps(A::eq(o, gs), wrapped(r)));
    rank = _mm256_sub_epi32(rank, _mm256_castps_si256(ahead));
  }
  const V kept =
      _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(s.topk_group)), rank));
  const unsigned keep = mask_bits(kept);
  // The bound: the k-th largest of the kept groups' top-2s (themselves kept experts), counted.
  float tau = kNegInf;
  if (2 * s.topk_group >= k)  // -inf for the groups not kept: a bound all the same
    tau = kth_largest2(A::select(kept, t1, A::set1(kNegInf)), A::select(kept, t2, A::set1(kNegInf)),
                       k);
  Candidates cd;
  for (unsigned b = keep; b != 0; b &= b - 1) {
    const int64_t q = __builtin_ctz(b);
    gather_at_least(c, q * per, (q + 1) * per, tau, cd);
  }
  select_candidates(cd, k, w);
  return true;
}

// Lane-wise top-2s g1 / g2 of each group of the row whose vector at j is load(j) (a load of c, or
// the scores computed in registers); false when the row holds a NaN.
template <class Load>
inline bool scan_groups(const Load& load, int64_t per, int64_t n_group, V* g1, V* g2) {
  M nan = A::isnan(A::set1(0.0f));  // all false
  for (int64_t q = 0; q < n_group; ++q) {
    V m1 = A::set1(kNegInf), m2 = m1;
    for (int64_t j = q * per; j < (q + 1) * per; j += W) {
      const V x = load(j);
      nan = mask_or(nan, A::isnan(x));
      push2_lanes(m1, m2, x);
    }
    g1[q] = m1;
    g2[q] = m2;
  }
  return mask_bits(nan) == 0;
}
#endif

inline void gate_topk_impl(const float* c, const GateTopKShape& s, const GateTopKScratch& w) {
#if defined(__AVX2__)
  if (grouped_fits_lanes(s)) {
    V g1[W], g2[W];
    const auto load = [c](int64_t j) { return A::load(c + j); };
    if (scan_groups(load, s.experts / s.n_group, s.n_group, g1, g2) &&
        select_grouped_lanes(c, s, w, g1, g2))
      return;
  }
#endif
  TopK top{s.top_k, 0, w.idx, w.val};
  if (s.n_group <= 1)
    select_plain(c, s, w, top);
  else
    select_grouped(c, s, w, top);
}

// p [W] = sigmoid(l) and c = p + bias with the elementwise kernels' functors (so bit for bit the
// tensor ops' sigmoid and add on this ISA); c is p without a bias. Returns c's vector.
inline V sigmoid_bias(const float* l, const float* bias, float* p, float* c) {
  const V x = kernels::ew::Sigmoid::apply<A>(A::load(l), nullptr);
  A::store(p, x);
  if (!bias) return x;
  const V y = kernels::ew::Add::apply<A>(x, A::load(bias), nullptr);
  A::store(c, y);
  return y;
}

inline void gate_sigmoid_topk_impl(const float* l, const float* bias, float* p, float* c,
                                   const GateTopKShape& s, const GateTopKScratch& w) {
  const int64_t e = s.experts;
  if (!bias) c = p;
#if defined(__AVX2__)
  if (grouped_fits_lanes(s)) {  // the scores, c and the groups' lane top-2s in one pass
    V g1[W], g2[W];
    const auto score = [&](int64_t j) {
      return sigmoid_bias(l + j, bias ? bias + j : nullptr, p + j, c + j);
    };
    if (scan_groups(score, e / s.n_group, s.n_group, g1, g2) &&
        select_grouped_lanes(c, s, w, g1, g2))
      return;
    return gate_topk_impl(c, s, w);  // a NaN: the original steps
  }
#endif
  int64_t j = 0;
  for (; j + W <= e; j += W) sigmoid_bias(l + j, bias ? bias + j : nullptr, p + j, c + j);
  if (j < e) {  // the tail through the same vector code on a padded copy, as the tensor ops
    float lt[W] = {}, bt[W] = {}, pt[W], ct[W];
    for (int64_t i = j; i < e; ++i) lt[i - j] = l[i], bt[i - j] = bias ? bias[i] : 0.0f;
    sigmoid_bias(lt, bias ? bt : nullptr, pt, ct);
    for (int64_t i = j; i < e; ++i) p[i] = pt[i - j], c[i] = bias ? ct[i - j] : pt[i - j];
  }
  gate_topk_impl(c, s, w);
}

inline constexpr GateTopKTable kGateTopKTable{&gate_topk_impl, &gate_sigmoid_topk_impl};

}  // namespace hp::kernels::HP_ISA
