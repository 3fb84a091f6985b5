// Body of an ISA translation unit for the norm row kernels (see norm_table.h). Included once per
// ISA after defining HP_ISA; the scalar TU also instantiates it over ScalarArch<double>.
//
// Each row is read from memory once: the row (a few KiB) stays in L1 between the reduction pass and
// the output pass. Row results depend only on the row and n, never on how rows are split between
// threads; the [n] weight-gradient accumulators are owned by the caller (one per fixed row block).
#pragma once

#include "hp/kernels/cpu/norm_table.h"
#include "hp/kernels/cpu/simd_arch.h"

namespace hp::kernels::HP_ISA {

template <class A, class T>
struct NormKernels {
  using V = typename A::V;
  static constexpr int W = A::W;

  // Σ f(a[i], b[i], c[i]) over a row: 4 vector accumulators, the partial last vector masked, then a
  // fixed combination tree — the order depends only on n.
  template <class F>
  static T row_sum(int64_t n, const T* a, const T* b, const T* c, F f) {
    V acc[4] = {A::set1(T(0)), A::set1(T(0)), A::set1(T(0)), A::set1(T(0))};
    int64_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W)
      for (int k = 0; k < 4; ++k)
        acc[k] = A::add(acc[k],
                        f(A::load(a + i + k * W), A::load(b + i + k * W), A::load(c + i + k * W)));
    for (; i + W <= n; i += W)
      acc[0] = A::add(acc[0], f(A::load(a + i), A::load(b + i), A::load(c + i)));
    if (i < n) {
      T pa[W] = {}, pb[W] = {}, pc[W] = {}, lane[W];
      for (int64_t k = 0; k < n - i; ++k) pa[k] = a[i + k], pb[k] = b[i + k], pc[k] = c[i + k];
      for (int k = 0; k < W; ++k) lane[k] = T(k);
      // Padded lanes would add f(0, 0, 0), which need not be 0: mask them out.
      auto live = A::lt(A::load(lane), A::set1(T(n - i)));
      acc[1] =
          A::add(acc[1], A::select(live, f(A::load(pa), A::load(pb), A::load(pc)), A::set1(T(0))));
    }
    return A::hsum(A::add(A::add(acc[0], acc[1]), A::add(acc[2], acc[3])));
  }

  // out[i] = f(a[i], b[i], c[i]); out may alias an input (read before write).
  template <class F>
  static void map_row(int64_t n, const T* a, const T* b, const T* c, T* out, F f) {
    int64_t i = 0;
    for (; i + W <= n; i += W) A::store(out + i, f(A::load(a + i), A::load(b + i), A::load(c + i)));
    if (i < n) {
      T pa[W] = {}, pb[W] = {}, pc[W] = {}, po[W];
      for (int64_t k = 0; k < n - i; ++k) pa[k] = a[i + k], pb[k] = b[i + k], pc[k] = c[i + k];
      A::store(po, f(A::load(pa), A::load(pb), A::load(pc)));
      for (int64_t k = 0; k < n - i; ++k) out[i + k] = po[k];
    }
  }

  static void rms_fwd(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t n, T eps) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * n;
      const T ss = row_sum(n, xr, xr, xr, [](V a, V, V) { return A::mul(a, a); });
      const T rs = T(1) / std::sqrt(ss / T(n) + eps);
      rstd[r] = rs;
      const V vr = A::set1(rs);
      // (x · rstd) · w, in HF's order.
      map_row(n, xr, w, w, y + r * n, [vr](V a, V b, V) { return A::mul(A::mul(a, vr), b); });
    }
  }

  static void ln_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows,
                     int64_t n, T eps) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * n;
      const T mu = row_sum(n, xr, xr, xr, [](V a, V, V) { return a; }) / T(n);
      const V vm = A::set1(mu);
      // Two passes over the L1-resident row: no E[x²] - mean² cancellation.
      const T var = row_sum(n, xr, xr, xr,
                            [vm](V a, V, V) {
                              V d = A::sub(a, vm);
                              return A::mul(d, d);
                            }) /
                    T(n);
      const T rs = T(1) / std::sqrt(var + eps);
      mean[r] = mu;
      rstd[r] = rs;
      const V vr = A::set1(rs);
      map_row(n, xr, w, b, y + r * n,
              [vm, vr](V a, V wv, V bv) { return A::fma(A::mul(A::sub(a, vm), vr), wv, bv); });
    }
  }

  // y = x·r·w with r = (mean(x²) + eps)^-1/2:
  //   dx = r·(g·w) - x · r³ · mean(g·w·x),   dw += g·x·r.
  static void rms_bwd(const T* g, const T* x, const T* w, const T* rstd, T* dx, T* dw, int64_t rows,
                      int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * n;
      const T* xr = x + r * n;
      const T rs = rstd[r];
      const V vr = A::set1(rs);
      if (dx) {
        const T dot = row_sum(n, gr, w, xr, [](V a, V b, V c) { return A::mul(A::mul(a, b), c); });
        const V vc = A::set1(rs * rs * rs * dot / T(n));
        map_row(n, gr, w, xr, dx + r * n, [vr, vc](V a, V b, V c) {
          return A::sub(A::mul(A::mul(a, b), vr), A::mul(c, vc));
        });
      }
      if (dw)
        map_row(n, gr, xr, dw, dw, [vr](V a, V b, V c) { return A::fma(A::mul(a, b), vr, c); });
    }
  }

  // x̂ = (x - mean)·r:  dx = r·(g·w - mean(g·w) - x̂ · mean(g·w·x̂)),  dw += g·x̂,  db += g.
  static void ln_bwd(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx, T* dw,
                     T* db, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * n;
      const T* xr = x + r * n;
      const V vm = A::set1(mean[r]), vr = A::set1(rstd[r]);
      if (dx) {
        const T s1 = row_sum(n, gr, w, w, [](V a, V b, V) { return A::mul(a, b); });
        const T s2 = row_sum(n, gr, w, xr, [vm, vr](V a, V b, V c) {
          return A::mul(A::mul(a, b), A::mul(A::sub(c, vm), vr));
        });
        const V m1 = A::set1(s1 / T(n)), m2 = A::set1(s2 / T(n));
        map_row(n, gr, w, xr, dx + r * n, [vm, vr, m1, m2](V a, V b, V c) {
          V xhat = A::mul(A::sub(c, vm), vr);
          return A::mul(vr, A::sub(A::sub(A::mul(a, b), m1), A::mul(xhat, m2)));
        });
      }
      if (dw)
        map_row(n, gr, xr, dw, dw,
                [vm, vr](V a, V b, V c) { return A::fma(a, A::mul(A::sub(b, vm), vr), c); });
      if (db) map_row(n, gr, db, db, db, [](V a, V b, V) { return A::add(a, b); });
    }
  }

  static const NormTable<T>& table() {
    static const NormTable<T> t = {&rms_fwd, &ln_fwd, &rms_bwd, &ln_bwd};
    return t;
  }
};

}  // namespace hp::kernels::HP_ISA
