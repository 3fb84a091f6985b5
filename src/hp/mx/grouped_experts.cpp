// mx_grouped_experts (linear.h): the three MX training GEMMs for per-expert weights over token
// groups. fprop and dgrad are grouped GEMMs over token row ranges; wgrad reduces over the tokens of
// each group, from the grouped column-wise quantizations of dY and X (blocks restart per group).
#include <memory>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/mx/linear.h"
#include "hp/mx/qtensor.h"
#include "hp/mx/quantize.h"

namespace hp::mx {
namespace {

using autograd::SavedTensor;
using detail::alloc_q;
using detail::nblk;
using detail::QTensor;

struct ExpertsSaved {
  QuantSpec spec;
  DType x_dtype;
  int64_t T, E, N, K, used;  // used = group_ends[E-1]: rows past it are outside every group
  std::vector<int32_t> ends;
  bool x_grad, w_grad;
  SavedTensor w, x_col_codes, x_col_scales;  // x grouped column-wise: [T, K], [S, K]
};

// Zeroes rows [used, T) of a [T, cols] tensor: no group covers them.
void zero_tail(const Tensor& t, int64_t used, int64_t T, int64_t cols) {
  if (used < T) t.as_strided({T - used, cols}, {cols, 1}, t.offset() + used * cols).fill_(0.0);
}

std::vector<Tensor> experts_backward(const ExpertsSaved& s, const Tensor& dy_in) {
  std::vector<Tensor> grads(3);
  if (!dy_in.defined()) return grads;
  const Tensor dy = dy_in.contiguous();  // [T, N]
  detail::check_float("mx_grouped_experts backward", "grad_output", dy);
  const int64_t T = s.T, E = s.E, N = s.N, K = s.K;
  const ElemFormat e = s.spec.elem;
  const int32_t* ends = s.ends.data();
  const int64_t S = grouped_colwise_scale_rows(ends, E, T);
  QTensor dy_row = alloc_q(T * N, T * nblk(N)), dy_col = alloc_q(T * N, S * N);
  quantize_grouped_dual(dy.raw_data(), dy.dtype(), T, N, ends, E, s.spec, dy_row.c(), dy_row.s(),
                        dy_col.c(), dy_col.s());
  const Tensor w = s.w.unpack().contiguous();  // [E, N, K]
  if (s.x_grad) {
    // Each expert's weight column-wise (blocks along N): codes [E, N, K], scales [E, ceil(N/32), K]
    // — the grouped column-wise layout of w viewed [E·N, K] with one group per expert.
    std::vector<int32_t> w_ends(static_cast<size_t>(E));
    for (int64_t g = 0; g < E; ++g) w_ends[size_t(g)] = int32_t((g + 1) * N);
    QTensor w_col = alloc_q(E * N * K, E * nblk(N) * K);
    quantize_grouped_colwise(w.raw_data(), w.dtype(), E * N, K, w_ends.data(), E, s.spec, w_col.c(),
                             w_col.s());
    Tensor dx = empty({T, K}, s.x_dtype);
    mx_grouped_gemm(dy_row.op(e, MxLayout::rowwise_k), w_col.op(e, MxLayout::colwise_k), ends, E, T,
                    K, N, dx.raw_data(), s.x_dtype);
    zero_tail(dx, s.used, T, K);
    grads[0] = dx;
  }
  if (s.w_grad) {
    const QTensor x_col{s.x_col_codes.unpack(), s.x_col_scales.unpack()};
    Tensor dw = empty({E, N, K}, w.dtype());
    mx_grouped_gemm_wgrad(dy_col.op(e, MxLayout::colwise_k), x_col.op(e, MxLayout::colwise_k), ends,
                          E, T, N, K, dw.raw_data(), w.dtype());
    grads[2] = dw;
  }
  return grads;
}

}  // namespace

Tensor mx_grouped_experts(const Tensor& x_sorted, const Tensor& group_ends, const Tensor& w,
                          QuantSpec spec) {
  const char* fn = "mx_grouped_experts";
  if (!w.defined() || w.dim() != 3)
    HP_THROW(ValueError, "mx", fn, ": w must be [experts, out, in], got ",
             w.defined() ? w.desc() : "undefined");
  if (!x_sorted.defined() || x_sorted.dim() != 2 || x_sorted.size(1) != w.size(2))
    HP_THROW(ValueError, "mx", fn, ": x_sorted ",
             x_sorted.defined() ? x_sorted.desc() : "undefined", " must be [tokens, ", w.size(2),
             "] to match w ", w.desc());
  if (!group_ends.defined() || group_ends.dtype() != DType::i32 || group_ends.dim() != 1 ||
      group_ends.size(0) != w.size(0))
    HP_THROW(ValueError, "mx", fn, ": group_ends must be i32 [", w.size(0), "], got ",
             group_ends.defined() ? group_ends.desc() : "undefined");
  detail::check_float(fn, "x_sorted", x_sorted);
  detail::check_float(fn, "w", w);
  const int64_t T = x_sorted.size(0), E = w.size(0), N = w.size(1), K = w.size(2);
  const Tensor ge = group_ends.contiguous();
  std::vector<int32_t> ends(ge.data<int32_t>(), ge.data<int32_t>() + E);
  const int64_t S = grouped_colwise_scale_rows(ends.data(), E, T);  // checks the offsets
  const bool grad = autograd::needs_grad({x_sorted, w});
  auto saved = std::make_shared<ExpertsSaved>();
  *saved = ExpertsSaved{spec,
                        x_sorted.dtype(),
                        T,
                        E,
                        N,
                        K,
                        E > 0 ? ends.back() : 0,
                        ends,
                        grad && x_sorted.requires_grad(),
                        grad && w.requires_grad(),
                        {},
                        {},
                        {}};

  const Tensor xc = x_sorted.contiguous(), wc = w.contiguous();
  const ElemFormat e = spec.elem;
  QTensor x_row = alloc_q(T * K, T * nblk(K)), w_row = alloc_q(E * N * K, E * N * nblk(K));
  if (saved->w_grad) {
    QTensor x_col = alloc_q(T * K, S * K);  // grouped column-wise, what wgrad reads
    quantize_grouped_dual(xc.raw_data(), xc.dtype(), T, K, ends.data(), E, spec, x_row.c(),
                          x_row.s(), x_col.c(), x_col.s());
    saved->x_col_codes = SavedTensor(x_col.codes);
    saved->x_col_scales = SavedTensor(x_col.scales);
  } else {
    quantize_grouped_rowwise(xc.raw_data(), xc.dtype(), T, K, ends.data(), E, spec, x_row.c(),
                             x_row.s());
  }
  // Row-wise blocks never span rows, so w [E, N, K] quantizes as one [E·N, K] matrix.
  quantize_rowwise(wc.raw_data(), wc.dtype(), E * N, K, spec, w_row.c(), w_row.s());
  Tensor y = empty({T, N}, x_sorted.dtype());
  mx_grouped_gemm(x_row.op(e, MxLayout::rowwise_k), w_row.op(e, MxLayout::rowwise_k), ends.data(),
                  E, T, N, K, y.raw_data(), y.dtype());
  zero_tail(y, saved->used, T, N);

  if (grad) {
    saved->w = SavedTensor(w);
    autograd::record(
        "MxGroupedExperts", {x_sorted, group_ends, w}, {y},
        [saved](const std::vector<Tensor>& g) { return experts_backward(*saved, g[0]); });
  }
  return y;
}

}  // namespace hp::mx
