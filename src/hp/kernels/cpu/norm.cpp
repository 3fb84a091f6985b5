#include "hp/kernels/cpu/norm.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/norm_table.h"

namespace hp::kernels {

int64_t norm_grad_block_rows(int64_t rows) {
  // At most ~64 partials (bounded scratch, cheap final combine), at least 16 rows per block.
  return std::max<int64_t>(16, (rows + 63) / 64);
}

namespace {

// Elements per tile of rows converted to / from f32 at once (x and y tiles stay in L2).
constexpr int64_t kTileElems = 8192;

template <class T>
const NormTable<T>& table_for();
template <>
const NormTable<float>& table_for<float>() {
  return kernel_table<NormTable<float>>();
}
template <>
const NormTable<double>& table_for<double>() {
  return norm_table_f64();
}

// Rows [r0, r0 + nr) of a contiguous [rows, n] tensor as compute type T: a pointer into the tensor
// when its dtype is T, else converted into `buf` (bf16 / f16 → f32 only).
template <class T>
const T* rows_in(const Tensor& t, int64_t r0, int64_t nr, int64_t n, std::vector<T>& buf) {
  if (t.dtype() == dtype_of<T>()) return static_cast<const T*>(t.raw_data()) + r0 * n;
  if constexpr (std::is_same_v<T, float>) {
    const EwTable& tab = kernel_table<EwTable>();
    buf.resize(static_cast<size_t>(nr * n));
    const uint16_t* src = static_cast<const uint16_t*>(t.raw_data()) + r0 * n;
    if (t.dtype() == DType::bf16)
      tab.bf16_to_f32(src, buf.data(), nr * n);
    else
      tab.f16_to_f32(src, buf.data(), nr * n);
    return buf.data();
  }
  HP_CHECK(false, "norm: unexpected dtype ", dtype_name(t.dtype()));
  return nullptr;
}

// Where to write rows [r0, r0 + nr): into the tensor when its dtype is T, else into `buf`, which
// rows_out then converts.
template <class T>
T* rows_dst(const Tensor& t, int64_t r0, int64_t nr, int64_t n, std::vector<T>& buf) {
  if (t.dtype() == dtype_of<T>()) return static_cast<T*>(t.raw_data()) + r0 * n;
  buf.resize(static_cast<size_t>(nr * n));
  return buf.data();
}

template <class T>
void rows_out(const Tensor& t, int64_t r0, int64_t nr, int64_t n, const T* src) {
  if (t.dtype() == dtype_of<T>()) return;
  if constexpr (std::is_same_v<T, float>) {
    const EwTable& tab = kernel_table<EwTable>();
    uint16_t* dst = static_cast<uint16_t*>(t.raw_data()) + r0 * n;
    if (t.dtype() == DType::bf16)
      tab.f32_to_bf16(src, dst, nr * n);
    else
      tab.f32_to_f16(src, dst, nr * n);
  }
}

// [n] parameter as a contiguous T vector (ones / zeros when undefined).
template <class T>
std::vector<T> param_vec(const Tensor& p, int64_t n, double fill) {
  if (!p.defined()) return std::vector<T>(static_cast<size_t>(n), static_cast<T>(fill));
  return p.template to_vector_as<T>();
}

template <class T>
NormForward forward_impl(NormKind kind, const Tensor& x, const Tensor& w, const Tensor& b,
                         double eps) {
  const int64_t n = x.shape().back();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType stat_dt = dtype_of<T>();
  NormForward out;
  out.y = empty(x.shape(), x.dtype());
  out.rstd = empty({rows}, stat_dt);
  if (kind == NormKind::layer) out.mean = empty({rows}, stat_dt);
  const std::vector<T> wv = param_vec<T>(w, n, 1.0), bv = param_vec<T>(b, n, 0.0);
  const NormTable<T>& tab = table_for<T>();
  T* rstd = out.rstd.template data<T>();
  T* mean = kind == NormKind::layer ? out.mean.template data<T>() : nullptr;
  const int64_t tile = std::max<int64_t>(1, kTileElems / std::max<int64_t>(n, 1));
  parallel_for(0, rows, tile, [&](int64_t c0, int64_t c1) {
    std::vector<T> xbuf, ybuf;
    for (int64_t r0 = c0; r0 < c1; r0 += tile) {
      const int64_t nr = std::min(tile, c1 - r0);
      const T* xs = rows_in<T>(x, r0, nr, n, xbuf);
      T* ys = rows_dst<T>(out.y, r0, nr, n, ybuf);
      if (kind == NormKind::rms)
        tab.rms_fwd(xs, wv.data(), ys, rstd + r0, nr, n, static_cast<T>(eps));
      else
        tab.ln_fwd(xs, wv.data(), bv.data(), ys, mean + r0, rstd + r0, nr, n, static_cast<T>(eps));
      rows_out<T>(out.y, r0, nr, n, ys);
    }
  });
  return out;
}

template <class T>
NormGrads backward_impl(NormKind kind, const Tensor& g, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool need_dx, bool need_dw,
                        bool need_db, DType b_dtype) {
  const int64_t n = x.shape().back();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  NormGrads out;
  if (need_dx) out.dx = empty(x.shape(), x.dtype());
  const std::vector<T> wv = param_vec<T>(w, n, 1.0);
  const Tensor rstd_c = rstd.to(dtype_of<T>());
  const Tensor mean_c = mean.defined() ? mean.to(dtype_of<T>()) : Tensor();
  const T* rs = rstd_c.template data<T>();
  const T* mu = mean_c.defined() ? mean_c.template data<T>() : nullptr;
  const NormTable<T>& tab = table_for<T>();
  const int64_t block = norm_grad_block_rows(rows);
  const int64_t nb = num_blocks(rows, block);
  // [nb, n] partials of dw and db, one row per fixed block of rows.
  std::vector<T> dw_part(need_dw ? static_cast<size_t>(nb * n) : 0, T(0));
  std::vector<T> db_part(need_db ? static_cast<size_t>(nb * n) : 0, T(0));
  const int64_t tile = std::max<int64_t>(1, kTileElems / std::max<int64_t>(n, 1));
  parallel_blocks(rows, block, [&](int64_t bi, int64_t b0, int64_t b1) {
    std::vector<T> gbuf, xbuf, dxbuf;
    T* dw = need_dw ? dw_part.data() + bi * n : nullptr;
    T* db = need_db ? db_part.data() + bi * n : nullptr;
    for (int64_t r0 = b0; r0 < b1; r0 += tile) {
      const int64_t nr = std::min(tile, b1 - r0);
      const T* gs = rows_in<T>(g, r0, nr, n, gbuf);
      const T* xs = rows_in<T>(x, r0, nr, n, xbuf);
      T* dxs = need_dx ? rows_dst<T>(out.dx, r0, nr, n, dxbuf) : nullptr;
      if (kind == NormKind::rms)
        tab.rms_bwd(gs, xs, wv.data(), rs + r0, dxs, dw, nr, n);
      else
        tab.ln_bwd(gs, xs, wv.data(), mu + r0, rs + r0, dxs, dw, db, nr, n);
      if (need_dx) rows_out<T>(out.dx, r0, nr, n, dxs);
    }
  });
  // Partials summed in block order: the result does not depend on which thread ran which block.
  auto combine = [&](const std::vector<T>& part, DType dt) {
    Tensor t = empty({n}, dtype_of<T>());
    T* d = t.template data<T>();
    std::fill(d, d + n, T(0));
    for (int64_t bi = 0; bi < nb; ++bi)
      for (int64_t j = 0; j < n; ++j) d[j] += part[static_cast<size_t>(bi * n + j)];
    return dt == dtype_of<T>() ? t : t.to(dt);
  };
  if (need_dw) out.dw = combine(dw_part, w.defined() ? w.dtype() : x.dtype());
  if (need_db) out.db = combine(db_part, b_dtype);
  return out;
}

Tensor as_compute(const Tensor& t, DType compute) {
  if (t.dtype() == compute ||
      (compute == DType::f32 && (t.dtype() == DType::bf16 || t.dtype() == DType::f16)))
    return t.contiguous();
  return t.to(compute);
}

}  // namespace

NormForward norm_forward(NormKind kind, const Tensor& x, const Tensor& w, const Tensor& b,
                         double eps) {
  HP_CHECK(kind == NormKind::layer || !b.defined());
  if (x.dtype() == DType::f64) return forward_impl<double>(kind, x.contiguous(), w, b, eps);
  return forward_impl<float>(kind, as_compute(x, DType::f32), w, b, eps);
}

NormGrads norm_backward(NormKind kind, const Tensor& g, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool need_dx, bool need_dw,
                        bool need_db, DType b_dtype) {
  if (x.dtype() == DType::f64)
    return backward_impl<double>(kind, as_compute(g, DType::f64), x.contiguous(), w, mean, rstd,
                                 need_dx, need_dw, need_db, b_dtype);
  // g in x's dtype when it is a narrow float (the usual case), otherwise f32.
  const Tensor gc = g.dtype() == x.dtype() ? g.contiguous() : g.to(DType::f32);
  return backward_impl<float>(kind, gc, as_compute(x, DType::f32), w, mean, rstd, need_dx, need_dw,
                              need_db, b_dtype);
}

}  // namespace hp::kernels
