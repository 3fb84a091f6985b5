// Body of an ISA translation unit for the softmax row kernels (softmax_table.h): templates on the
// SIMD arch A and element type T, instantiated once per ISA after defining HP_ISA (and, in the
// portable TU, once more for double). See simd_arch.h for why ISA TUs hold no std containers.
#pragma once

#include "hp/kernels/cpu/simd_arch.h"
#include "hp/kernels/cpu/softmax_table.h"

namespace hp::kernels::HP_ISA {

template <class A, class T>
struct SoftmaxRows {
  using V = typename A::V;
  static constexpr int W = A::W;

  // The r < W trailing elements, padded with `fill`.
  static V load_tail(const T* x, int64_t r, T fill) {
    T buf[W];
    for (int k = 0; k < W; ++k) buf[k] = k < r ? x[k] : fill;
    return A::load(buf);
  }
  static void store_tail(T* y, V v, int64_t r) {
    T buf[W];
    A::store(buf, v);
    for (int64_t k = 0; k < r; ++k) y[k] = buf[k];
  }
  // v with lanes >= r zeroed (the tail of a sum must not see its padding).
  static V zero_tail(V v, int64_t r) {
    T buf[W];
    A::store(buf, v);
    for (int k = static_cast<int>(r); k < W; ++k) buf[k] = T(0);
    return A::load(buf);
  }

  // Folds f(i) over vector steps with 4 accumulators and a padded tail, in a fixed order.
  // f(i, r) returns the vector for elements [i, i + W); r < W marks the (padded) tail.
  template <class Combine, class F>
  static V fold(int64_t n, T identity, Combine combine, F f) {
    V acc[4] = {A::set1(identity), A::set1(identity), A::set1(identity), A::set1(identity)};
    int64_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W)
      for (int k = 0; k < 4; ++k) acc[k] = combine(acc[k], f(i + k * W, W));
    for (; i + W <= n; i += W) acc[0] = combine(acc[0], f(i, W));
    if (i < n) acc[1] = combine(acc[1], f(i, n - i));
    return combine(combine(acc[0], acc[1]), combine(acc[2], acc[3]));
  }

  static V load_or_tail(const T* x, int64_t i, int64_t r, T fill) {
    return r == W ? A::load(x + i) : load_tail(x + i, r, fill);
  }

  static T row_max(const T* x, int64_t n) {
    const T ninf = -static_cast<T>(__builtin_inf());
    // max(v, acc): a NaN already in acc sticks; a NaN in v is dropped here but poisons the sum.
    V m = fold(
        n, ninf, [](V a, V v) { return A::max(v, a); },
        [&](int64_t i, int64_t r) { return load_or_tail(x, i, r, ninf); });
    return A::hmax(m);
  }

  static T sum_exp(const T* x, int64_t n, T mx) {
    const V vm = A::set1(mx);
    V s = fold(
        n, T(0), [](V a, V v) { return A::add(a, v); },
        [&](int64_t i, int64_t r) {
          V e = A::exp(A::sub(load_or_tail(x, i, r, T(0)), vm));
          return r == W ? e : zero_tail(e, r);
        });
    return A::hsum(s);
  }

  static T dot(const T* x, const T* y, int64_t n) {
    V s = fold(
        n, T(0), [](V a, V v) { return A::add(a, v); },
        [&](int64_t i, int64_t r) {
          return A::mul(load_or_tail(x, i, r, T(0)), load_or_tail(y, i, r, T(0)));
        });
    return A::hsum(s);
  }

  static T sum(const T* x, int64_t n) {
    V s = fold(
        n, T(0), [](V a, V v) { return A::add(a, v); },
        [&](int64_t i, int64_t r) { return load_or_tail(x, i, r, T(0)); });
    return A::hsum(s);
  }

  // y[i] = f(i) for each vector step, tail stored partially.
  template <class F>
  static void write(T* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + W <= n; i += W) A::store(y + i, f(i, W));
    if (i < n) store_tail(y + i, f(i, n - i), n - i);
  }

  static T logsumexp(const T* x, int64_t n) {
    const T mx = row_max(x, n);
    if (mx == static_cast<T>(__builtin_inf()) || mx == -static_cast<T>(__builtin_inf())) return mx;
    return mx + std::log(sum_exp(x, n, mx));
  }

  static void softmax(const T* x, T* y, int64_t n) {
    const V vm = A::set1(row_max(x, n));
    // Pass 2 stores exp(x - max) and sums it; pass 3 scales in place (y is still in cache).
    V s = fold(
        n, T(0), [](V a, V v) { return A::add(a, v); },
        [&](int64_t i, int64_t r) {
          V e = A::exp(A::sub(load_or_tail(x, i, r, T(0)), vm));
          if (r == W) {
            A::store(y + i, e);
            return e;
          }
          store_tail(y + i, e, r);
          return zero_tail(e, r);
        });
    const V inv = A::set1(T(1) / A::hsum(s));
    write(y, n, [&](int64_t i, int64_t r) { return A::mul(load_or_tail(y, i, r, T(0)), inv); });
  }

  static void log_softmax(const T* x, T* y, int64_t n) {
    const T mx = row_max(x, n);
    const V lse = A::set1(mx + std::log(sum_exp(x, n, mx)));
    write(y, n, [&](int64_t i, int64_t r) { return A::sub(load_or_tail(x, i, r, T(0)), lse); });
  }

  static void softmax_bwd(const T* y, const T* g, T* dx, int64_t n) {
    const V d = A::set1(dot(g, y, n));
    write(dx, n, [&](int64_t i, int64_t r) {
      return A::mul(load_or_tail(y, i, r, T(0)), A::sub(load_or_tail(g, i, r, T(0)), d));
    });
  }

  static void log_softmax_bwd(const T* y, const T* g, T* dx, int64_t n) {
    const V s = A::set1(sum(g, n));
    write(dx, n, [&](int64_t i, int64_t r) {
      V p = A::exp(load_or_tail(y, i, r, T(0)));
      return A::sub(load_or_tail(g, i, r, T(0)), A::mul(p, s));
    });
  }

  static void cross_entropy_bwd(const T* x, T lse, int64_t target, T scale, T* dx, int64_t n) {
    const V vl = A::set1(lse), vs = A::set1(scale);
    write(dx, n, [&](int64_t i, int64_t r) {
      return A::mul(A::exp(A::sub(load_or_tail(x, i, r, T(0)), vl)), vs);
    });
    if (target >= 0 && target < n) dx[target] -= scale;
  }

  static SoftmaxRowFns<T> fns() {
    return {&softmax, &log_softmax, &logsumexp, &softmax_bwd, &log_softmax_bwd, &cross_entropy_bwd};
  }
};

inline const SoftmaxRowFns<float>& softmax_fns() {
  static const SoftmaxRowFns<float> t = SoftmaxRows<Arch, float>::fns();
  return t;
}

}  // namespace hp::kernels::HP_ISA
