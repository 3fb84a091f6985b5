// Shared by the GEMM tests (gemm_test.cpp, gemm_native_test.cpp): cases, operand layouts,
// random operands and the double-precision reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hp/core/dtype.h"

namespace hp::kernels::test {

// A GEMM case: op shapes, transposes, and how much each leading dimension exceeds the minimum.
struct Case {
  int64_t M, N, K;
  bool ta, tb;
  int64_t pad = 0;
};

// Stored operand sizes (rows × ld) for a case.
struct Layout {
  int64_t lda, ldb, ldc, a_rows, b_rows;
  explicit Layout(const Case& c)
      : lda((c.ta ? c.M : c.K) + c.pad),
        ldb((c.tb ? c.K : c.N) + c.pad),
        ldc(c.N + c.pad),
        a_rows(c.ta ? c.K : c.M),
        b_rows(c.tb ? c.N : c.K) {}
};

inline std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}

// Naive double reference: ref [M, ldc] = alpha·op(A)·op(B) + beta·C, plus a per-element error
// scale sum|alpha·a·b| + |beta·c| for tolerances.
inline void reference(const Case& c, const Layout& l, float alpha, const float* A, const float* B,
               float beta, const float* C, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(size_t(c.M * l.ldc), 0.0);
  mag.assign(ref.size(), 0.0);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double s = 0, a_s = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta ? A[k * l.lda + m] : A[m * l.lda + k];
        const double b = c.tb ? B[n * l.ldb + k] : B[k * l.ldb + n];
        s += a * b;
        a_s += std::fabs(a * b);
      }
      const double old = beta == 0.0f ? 0.0 : double(C[m * l.ldc + n]);
      ref[size_t(m * l.ldc + n)] = double(alpha) * s + double(beta) * old;
      mag[size_t(m * l.ldc + n)] = std::fabs(alpha) * a_s + std::fabs(beta * old);
    }
}

inline double f32_tol(double mag, int64_t K) {
  return 4e-7 * double(K + 4) * mag + 1e-30;
}

inline std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 65}, {65, 7, 130}, {33, 130, 7}, {130, 65, 33}};
  for (auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (int64_t pad : {0, 5}) out.push_back({s[0], s[1], s[2], bool(t & 1), bool(t & 2), pad});
  return out;
}

inline std::string name(const Case& c) {
  return std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) +
         (c.ta ? " ta" : "") + (c.tb ? " tb" : "") + " pad " + std::to_string(c.pad);
}

}  // namespace hp::kernels::test
