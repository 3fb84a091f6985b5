#include "hp/kernels/cpu/softmax.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <type_traits>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/softmax_table.h"
#include "hp/kernels/cpu/typed.h"

namespace hp::kernels {

namespace {

template <class S>
using ComputeT = typename detail::Compute<S>::type;

template <class CT>
const SoftmaxRowFns<CT>& row_fns() {
  if constexpr (std::is_same_v<CT, double>)
    return softmax_row_fns_f64();
  else
    return kernel_table<SoftmaxRowFns<float>>();
}

// A row of storage type S seen as compute type: the row itself when the types agree, else a
// converted copy in `buf` (vector converters for bf16/f16).
template <class S>
const ComputeT<S>* load_row(const S* p, std::vector<ComputeT<S>>& buf, int64_t n) {
  if constexpr (std::is_same_v<S, ComputeT<S>>) {
    return p;
  } else {
    const EwTable& tab = kernel_table<EwTable>();
    const auto* bits = reinterpret_cast<const uint16_t*>(p);
    if constexpr (std::is_same_v<S, bf16>)
      tab.bf16_to_f32(bits, buf.data(), n);
    else
      tab.f16_to_f32(bits, buf.data(), n);
    return buf.data();
  }
}

// Where to compute an output row: the row itself or `buf`, flushed by store_row.
template <class S>
ComputeT<S>* out_row(S* p, std::vector<ComputeT<S>>& buf) {
  if constexpr (std::is_same_v<S, ComputeT<S>>)
    return p;
  else
    return buf.data();
}

template <class S>
void store_row(const ComputeT<S>* c, S* p, int64_t n) {
  if constexpr (!std::is_same_v<S, ComputeT<S>>) {
    const EwTable& tab = kernel_table<EwTable>();
    auto* bits = reinterpret_cast<uint16_t*>(p);
    if constexpr (std::is_same_v<S, bf16>)
      tab.f32_to_bf16(c, bits, n);
    else
      tab.f32_to_f16(c, bits, n);
  }
}

// Scratch rows for one chunk of work (empty when no conversion is needed).
template <class S>
std::vector<ComputeT<S>> scratch(int64_t n) {
  return std::vector<ComputeT<S>>(std::is_same_v<S, ComputeT<S>> ? 0 : static_cast<size_t>(n));
}

// fn(r0, r1) over rows in parallel, about 32K elements per chunk.
void parallel_rows(int64_t rows, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), fn);
}

int64_t row_len(const Tensor& x) {
  return x.dim() == 0 ? 1 : x.shape().back();
}

}  // namespace

DType softmax_compute_dtype(DType dt) {
  return dt == DType::f64 ? DType::f64 : DType::f32;
}

Tensor softmax_lastdim(const Tensor& x, bool log) {
  HP_CHECK(x.is_contiguous());
  const int64_t n = row_len(x), rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = empty(x.shape(), x.dtype());
  detail::dispatch_float(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using S = decltype(tag);
    const auto& f = row_fns<ComputeT<S>>();
    const S* xp = static_cast<const S*>(x.raw_data());
    S* yp = static_cast<S*>(y.raw_data());
    parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
      auto xb = scratch<S>(n), yb = scratch<S>(n);
      for (int64_t r = r0; r < r1; ++r) {
        auto* yo = out_row(yp + r * n, yb);
        (log ? f.log_softmax : f.softmax)(load_row(xp + r * n, xb, n), yo, n);
        store_row(yo, yp + r * n, n);
      }
    });
  });
  return y;
}

Tensor softmax_lastdim_backward(const Tensor& y, const Tensor& g_in, bool log) {
  HP_CHECK(y.is_contiguous() && g_in.shape() == y.shape());
  const Tensor g = g_in.dtype() == y.dtype() ? g_in.contiguous() : g_in.to(y.dtype());
  const int64_t n = row_len(y), rows = n == 0 ? 0 : y.numel() / n;
  Tensor dx = empty(y.shape(), y.dtype());
  detail::dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    using S = decltype(tag);
    const auto& f = row_fns<ComputeT<S>>();
    const S* yp = static_cast<const S*>(y.raw_data());
    const S* gp = static_cast<const S*>(g.raw_data());
    S* dp = static_cast<S*>(dx.raw_data());
    parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
      auto yb = scratch<S>(n), gb = scratch<S>(n), db = scratch<S>(n);
      for (int64_t r = r0; r < r1; ++r) {
        auto* d = out_row(dp + r * n, db);
        const auto* yr = load_row(yp + r * n, yb, n);
        const auto* gr = load_row(gp + r * n, gb, n);
        (log ? f.log_softmax_bwd : f.softmax_bwd)(yr, gr, d, n);
        store_row(d, dp + r * n, n);
      }
    });
  });
  return dx;
}

Tensor logsumexp_lastdim(const Tensor& x) {
  HP_CHECK(x.is_contiguous() && x.dim() >= 1);
  const int64_t n = x.shape().back();
  const Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = shape_numel(out_shape);
  Tensor out = empty(out_shape, softmax_compute_dtype(x.dtype()));
  detail::dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
    using S = decltype(tag);
    using CT = ComputeT<S>;
    const auto& f = row_fns<CT>();
    const S* xp = static_cast<const S*>(x.raw_data());
    CT* op = static_cast<CT*>(out.raw_data());
    parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
      auto xb = scratch<S>(n);
      for (int64_t r = r0; r < r1; ++r) op[r] = f.logsumexp(load_row(xp + r * n, xb, n), n);
    });
  });
  return out.dtype() == x.dtype() ? out : out.to(x.dtype());
}

void cross_entropy_forward(const Tensor& logits, const std::vector<int64_t>& targets,
                           int64_t ignore_index, Tensor* loss, Tensor* lse) {
  HP_CHECK(logits.is_contiguous() && logits.dim() == 2);
  const int64_t rows = logits.shape()[0], n = logits.shape()[1];
  HP_CHECK(static_cast<int64_t>(targets.size()) == rows);
  const DType ct = softmax_compute_dtype(logits.dtype());
  *loss = empty({rows}, ct);
  *lse = empty({rows}, ct);
  detail::dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using S = decltype(tag);
    using CT = ComputeT<S>;
    const auto& f = row_fns<CT>();
    const S* xp = static_cast<const S*>(logits.raw_data());
    CT* lp = static_cast<CT*>(loss->raw_data());
    CT* sp = static_cast<CT*>(lse->raw_data());
    parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
      auto xb = scratch<S>(n);
      for (int64_t r = r0; r < r1; ++r) {
        const CT* x = load_row(xp + r * n, xb, n);
        sp[r] = f.logsumexp(x, n);
        lp[r] = targets[r] == ignore_index ? CT(0) : sp[r] - x[targets[r]];
      }
    });
  });
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& lse,
                              const std::vector<int64_t>& targets, int64_t ignore_index,
                              const std::vector<double>& scale) {
  HP_CHECK(logits.is_contiguous() && logits.dim() == 2);
  const int64_t rows = logits.shape()[0], n = logits.shape()[1];
  HP_CHECK(lse.dtype() == softmax_compute_dtype(logits.dtype()) && lse.numel() == rows);
  Tensor dx = empty(logits.shape(), logits.dtype());
  detail::dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using S = decltype(tag);
    using CT = ComputeT<S>;
    const auto& f = row_fns<CT>();
    const S* xp = static_cast<const S*>(logits.raw_data());
    const CT* sp = static_cast<const CT*>(lse.raw_data());
    S* dp = static_cast<S*>(dx.raw_data());
    parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
      auto xb = scratch<S>(n), db = scratch<S>(n);
      for (int64_t r = r0; r < r1; ++r) {
        if (targets[r] == ignore_index) {
          std::memset(static_cast<void*>(dp + r * n), 0, static_cast<size_t>(n) * sizeof(S));
          continue;
        }
        auto* d = out_row(dp + r * n, db);
        f.cross_entropy_bwd(load_row(xp + r * n, xb, n), sp[r], targets[r],
                            static_cast<CT>(scale[r]), d, n);
        store_row(d, dp + r * n, n);
      }
    });
  });
  return dx;
}

}  // namespace hp::kernels
