#include "hp/kernels/cpu/select.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/typed.h"

namespace hp::kernels {

namespace {

// a > b with NaN above every number (and equal to another NaN).
template <class C>
bool greater(C a, C b) {
  const bool na = a != a, nb = b != b;
  return na ? !nb : (!nb && a > b);
}

void rows_of(const Tensor& x, int64_t* rows, int64_t* n) {
  HP_CHECK(x.is_contiguous() && x.dim() == 2);
  *rows = x.shape()[0];
  *n = x.shape()[1];
}

}  // namespace

void max_lastdim(const Tensor& x, Tensor* values, Tensor* indices) {
  int64_t rows, n;
  rows_of(x, &rows, &n);
  HP_CHECK(n >= 1);
  *values = empty({rows}, x.dtype());
  *indices = empty({rows}, DType::i64);
  detail::dispatch_float(x.dtype(), "max", [&](auto tag) {
    using S = decltype(tag);
    using C = detail::Compute<S>;
    const S* xp = static_cast<const S*>(x.raw_data());
    S* vp = static_cast<S*>(values->raw_data());
    int64_t* ip = indices->data<int64_t>();
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const S* row = xp + r * n;
        int64_t best = 0;
        auto bv = C::load(row[0]);
        for (int64_t j = 1; j < n; ++j) {
          const auto v = C::load(row[j]);
          if (greater(v, bv)) best = j, bv = v;
        }
        vp[r] = row[best];
        ip[r] = best;
      }
    });
  });
}

void topk_lastdim(const Tensor& x, int64_t k, Tensor* values, Tensor* indices) {
  int64_t rows, n;
  rows_of(x, &rows, &n);
  HP_CHECK(k >= 0 && k <= n);
  *values = empty({rows, k}, x.dtype());
  *indices = empty({rows, k}, DType::i64);
  if (k == 0 || rows == 0) return;
  detail::dispatch_float(x.dtype(), "topk", [&](auto tag) {
    using S = decltype(tag);
    using C = detail::Compute<S>;
    const S* xp = static_cast<const S*>(x.raw_data());
    S* vp = static_cast<S*>(values->raw_data());
    int64_t* ip = indices->data<int64_t>();
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t r = r0; r < r1; ++r) {
        const S* row = xp + r * n;
        std::iota(order.begin(), order.end(), int64_t{0});
        // Strict order: larger first, then lower index (a total order, so the result is unique).
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [row](int64_t i, int64_t j) {
                            const auto a = C::load(row[i]), b = C::load(row[j]);
                            return greater(a, b) || (!greater(b, a) && i < j);
                          });
        for (int64_t q = 0; q < k; ++q) vp[r * k + q] = row[order[q]], ip[r * k + q] = order[q];
      }
    });
  });
}

}  // namespace hp::kernels
