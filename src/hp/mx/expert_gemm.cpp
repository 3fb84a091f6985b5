// One expert's MX training GEMMs (expert_gemm.h): the calls of mx_grouped_experts
// (grouped_experts.cpp) with a single group.
#include "hp/mx/expert_gemm.h"

#include <cstring>

#include "hp/mx/gemm.h"
#include "hp/mx/qtensor.h"
#include "hp/mx/quantize.h"

namespace hp::mx {

using detail::alloc_q;
using detail::nblk;
using detail::QTensor;

void expert_fprop(const void* x, const void* w, int64_t rows, int64_t N, int64_t K, QuantSpec spec,
                  ExpertDTypes dt, void* y) {
  if (rows == 0) return;
  const int32_t end = int32_t(rows);
  QTensor xq = alloc_q(rows * K, rows * nblk(K)), wq = alloc_q(N * K, N * nblk(K));
  quantize_grouped_rowwise(x, dt.act, rows, K, &end, 1, spec, xq.c(), xq.s());
  quantize_rowwise(w, dt.weight, N, K, spec, wq.c(), wq.s());
  mx_grouped_gemm(xq.op(spec.elem, MxLayout::rowwise_k), wq.op(spec.elem, MxLayout::rowwise_k),
                  &end, 1, rows, N, K, y, dt.act);
}

void expert_dgrad(const void* dy, const void* w, int64_t rows, int64_t N, int64_t K, QuantSpec spec,
                  ExpertDTypes dt, void* dx) {
  if (rows == 0) return;
  const int32_t end = int32_t(rows), w_end = int32_t(N);
  QTensor dyq = alloc_q(rows * N, rows * nblk(N)), wq = alloc_q(N * K, nblk(N) * K);
  quantize_grouped_rowwise(dy, dt.act, rows, N, &end, 1, spec, dyq.c(), dyq.s());
  quantize_grouped_colwise(w, dt.weight, N, K, &w_end, 1, spec, wq.c(), wq.s());
  mx_grouped_gemm(dyq.op(spec.elem, MxLayout::rowwise_k), wq.op(spec.elem, MxLayout::colwise_k),
                  &end, 1, rows, K, N, dx, dt.act);
}

void expert_wgrad(const void* dy, const void* x, int64_t rows, int64_t N, int64_t K, QuantSpec spec,
                  ExpertDTypes dt, void* dw) {
  if (rows == 0) {  // as the grouped wgrad of an empty group with beta 0
    std::memset(dw, 0, size_t(N * K) * dtype_size(dt.weight));
    return;
  }
  const int32_t end = int32_t(rows);
  const int64_t S = grouped_colwise_scale_rows(&end, 1, rows);
  QTensor dyq = alloc_q(rows * N, S * N), xq = alloc_q(rows * K, S * K);
  quantize_grouped_colwise(dy, dt.act, rows, N, &end, 1, spec, dyq.c(), dyq.s());
  quantize_grouped_colwise(x, dt.act, rows, K, &end, 1, spec, xq.c(), xq.s());
  mx_grouped_gemm_wgrad(dyq.op(spec.elem, MxLayout::colwise_k),
                        xq.op(spec.elem, MxLayout::colwise_k), &end, 1, rows, N, K, dw, dt.weight);
}

}  // namespace hp::mx
