// Shared by the MX GEMM tests (gemm_test.cpp, gemm_bf16_test.cpp): quantized operands in either
// layout with their dequantized values, random inputs and the double-precision reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "hp/mx/gemm.h"
#include "hp/mx/quantize.h"

namespace hp::mx::test {

// An operand [rows, K] quantized in the given layout, and its dequantized values [rows, K].
struct Op {
  std::vector<uint8_t> codes, scales;
  std::vector<float> deq;
  MxOperand desc(ElemFormat elem, MxLayout layout) const {
    return MxOperand{codes.data(), scales.data(), elem, layout};
  }
};

// x [rows, K]. rowwise_k quantizes x row-wise; colwise_k stores xᵀ [K, rows] and quantizes it
// column-wise (the "original orientation" of a dgrad / wgrad operand).
inline Op make_op(const std::vector<float>& x, int64_t rows, int64_t K, ElemFormat elem,
                  MxLayout layout) {
  Op op;
  op.codes.resize(size_t(rows * K));
  op.deq.resize(size_t(rows * K));
  const QuantSpec spec{elem, ScaleMode::rceil};
  if (layout == MxLayout::rowwise_k) {
    op.scales.resize(size_t(rows * ((K + 31) / 32)));
    quantize_rowwise(x.data(), DType::f32, rows, K, spec, op.codes.data(), op.scales.data());
    dequantize_rowwise(op.codes.data(), op.scales.data(), rows, K, elem, op.deq.data(), DType::f32);
  } else {
    std::vector<float> xt(x.size()), dt(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) xt[size_t(k * rows + r)] = x[size_t(r * K + k)];
    op.scales.resize(size_t((K + 31) / 32 * rows));
    quantize_colwise(xt.data(), DType::f32, K, rows, spec, op.codes.data(), op.scales.data());
    dequantize_colwise(op.codes.data(), op.scales.data(), K, rows, elem, dt.data(), DType::f32);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) op.deq[size_t(r * K + k)] = dt[size_t(k * rows + r)];
  }
  return op;
}

inline std::vector<float> randn(int64_t n, uint32_t seed, bool small_ints = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> id(-7, 7);
  std::vector<float> v(static_cast<size_t>(n));
  // Small ints (|v| <= 7, exact in E4M3 after any power-of-two scale) keep every partial sum exact.
  for (auto& x : v) x = small_ints ? float(id(rng)) : nd(rng);
  return v;
}

// c [M, N] = A [M, K] · B [N, K]ᵀ in double; also returns sum |a||b| per element for tolerances.
inline void ref_gemm(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t N,
              int64_t K, std::vector<double>& c, std::vector<double>& mag) {
  c.assign(size_t(M * N), 0.0);
  mag.assign(size_t(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, s_abs = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(a[size_t(m * K + k)]) * double(b[size_t(n * K + k)]);
        s += p;
        s_abs += std::fabs(p);
      }
      c[size_t(m * N + n)] = s;
      mag[size_t(m * N + n)] = s_abs;
    }
}

constexpr MxLayout kLayouts[] = {MxLayout::rowwise_k, MxLayout::colwise_k};

}  // namespace hp::mx::test
