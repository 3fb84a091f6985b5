// One expert's MX training GEMMs (expert_gemm.h): the calls of mx_grouped_experts
// (grouped_experts.cpp) with a single group.
#include "hp/mx/expert_gemm.h"

#include <algorithm>

#include "hp/mx/gemm.h"
#include "hp/mx/qtensor.h"
#include "hp/mx/quantize.h"

namespace hp::mx {

using detail::alloc_q;
using detail::nblk;
using detail::QTensor;

void expert_fprop(const float* x, const float* w, int64_t rows, int64_t N, int64_t K,
                  QuantSpec spec, float* y) {
  if (rows == 0) return;
  const int32_t end = int32_t(rows);
  QTensor xq = alloc_q(rows * K, rows * nblk(K)), wq = alloc_q(N * K, N * nblk(K));
  quantize_grouped_rowwise(x, DType::f32, rows, K, &end, 1, spec, xq.c(), xq.s());
  quantize_rowwise(w, DType::f32, N, K, spec, wq.c(), wq.s());
  mx_grouped_gemm(xq.op(spec.elem, MxLayout::rowwise_k), wq.op(spec.elem, MxLayout::rowwise_k),
                  &end, 1, rows, N, K, y, DType::f32);
}

void expert_dgrad(const float* dy, const float* w, int64_t rows, int64_t N, int64_t K,
                  QuantSpec spec, float* dx) {
  if (rows == 0) return;
  const int32_t end = int32_t(rows), w_end = int32_t(N);
  QTensor dyq = alloc_q(rows * N, rows * nblk(N)), wq = alloc_q(N * K, nblk(N) * K);
  quantize_grouped_rowwise(dy, DType::f32, rows, N, &end, 1, spec, dyq.c(), dyq.s());
  quantize_grouped_colwise(w, DType::f32, N, K, &w_end, 1, spec, wq.c(), wq.s());
  mx_grouped_gemm(dyq.op(spec.elem, MxLayout::rowwise_k), wq.op(spec.elem, MxLayout::colwise_k),
                  &end, 1, rows, K, N, dx, DType::f32);
}

void expert_wgrad(const float* dy, const float* x, int64_t rows, int64_t N, int64_t K,
                  QuantSpec spec, float* dw) {
  if (rows == 0) {  // as the grouped wgrad of an empty group with beta 0
    std::fill_n(dw, N * K, 0.0f);
    return;
  }
  const int32_t end = int32_t(rows);
  const int64_t S = grouped_colwise_scale_rows(&end, 1, rows);
  QTensor dyq = alloc_q(rows * N, S * N), xq = alloc_q(rows * K, S * K);
  quantize_grouped_colwise(dy, DType::f32, rows, N, &end, 1, spec, dyq.c(), dyq.s());
  quantize_grouped_colwise(x, DType::f32, rows, K, &end, 1, spec, xq.c(), xq.s());
  mx_grouped_gemm_wgrad(dyq.op(spec.elem, MxLayout::colwise_k),
                        xq.op(spec.elem, MxLayout::colwise_k), &end, 1, rows, N, K, dw, DType::f32);
}

}  // namespace hp::mx
