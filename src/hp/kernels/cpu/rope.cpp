#include "hp/kernels/cpu/rope.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/rope_row.h"

namespace hp::kernels {
namespace {

// One f64 row (gradient checks): the f32 rows run the ISA kernels of rope_impl.h.
void rotate_row(const double* x, const double* c, const double* s, double* y, int64_t half,
                bool interleaved) {
  for (int64_t i = 0; i < half; ++i) {
    const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const double a = x[ia], b = x[ib];
    y[ia] = a * c[i] - b * s[i];
    y[ib] = b * c[i] + a * s[i];
  }
}

template <class T>
void rope_impl(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
               bool interleaved, int64_t seq_dim, bool inverse) {
  const int64_t d = x.shape().back(), half = d / 2;
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  const int64_t seq = x.shape()[seq_dim];
  // Rows between consecutive positions: the product of the dims after seq_dim (except the last).
  int64_t inner = 1;
  for (int64_t k = seq_dim + 1; k < x.dim() - 1; ++k) inner *= x.shape()[k];
  // Per-row tables [B, T, D/2]: the rows of batch element b are the b-th 1/B of x's rows.
  const int64_t rows_per_batch = cos.dim() == 3 && rows > 0 ? rows / x.shape()[0] : 0;
  const std::vector<T> cv = cos.template to_vector_as<T>();
  std::vector<T> sv = sin.template to_vector_as<T>();
  if (inverse)
    for (T& v : sv) v = -v;
  const bool narrow = x.dtype() != dtype_of<T>();
  const EwTable& tab = kernel_table<EwTable>();
  const auto row_f32 = kernel_table<RopeTable>().row;
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)),
               [&](int64_t r0, int64_t r1) {
                 std::vector<float> xb(narrow ? d : 0), yb(narrow ? d : 0);
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t t =
                       (r / inner) % seq + (rows_per_batch > 0 ? r / rows_per_batch * seq : 0);
                   const T* c = cv.data() + t * half;
                   const T* s = sv.data() + t * half;
                   if constexpr (std::is_same_v<T, float>) {
                     if (narrow) {
                       const uint16_t* src = static_cast<const uint16_t*>(x.raw_data()) + r * d;
                       uint16_t* dst = static_cast<uint16_t*>(out.raw_data()) + r * d;
                       if (x.dtype() == DType::bf16)
                         tab.bf16_to_f32(src, xb.data(), d);
                       else
                         tab.f16_to_f32(src, xb.data(), d);
                       row_f32(xb.data(), c, s, yb.data(), half, interleaved);
                       if (x.dtype() == DType::bf16)
                         tab.f32_to_bf16(yb.data(), dst, d);
                       else
                         tab.f32_to_f16(yb.data(), dst, d);
                       continue;
                     }
                   }
                   const T* xr = static_cast<const T*>(x.raw_data()) + r * d;
                   T* yr = static_cast<T*>(out.raw_data()) + r * d;
                   if constexpr (std::is_same_v<T, float>)
                     row_f32(xr, c, s, yr, half, interleaved);
                   else
                     rotate_row(xr, c, s, yr, half, interleaved);
                 }
               });
}

}  // namespace

void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
          bool interleaved, int64_t seq_dim, bool inverse) {
  HP_CHECK(x.is_contiguous() && out.is_contiguous() && x.shape() == out.shape() &&
           x.dtype() == out.dtype());
  if (x.dtype() == DType::f64)
    rope_impl<double>(x, cos, sin, out, interleaved, seq_dim, inverse);
  else
    rope_impl<float>(x, cos, sin, out, interleaved, seq_dim, inverse);
}

}  // namespace hp::kernels
