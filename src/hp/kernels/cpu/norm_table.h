// Per-ISA row kernels of RMSNorm and LayerNorm over the last dim (filled by norm_impl.h in each ISA
// translation unit; driven by norm.cpp). All pointers are contiguous rows of compute type T (f32,
// or f64 for gradient checks): x, y, g, dx are [rows, n]; w, b, dw, db are [n]; mean, rstd are
// [rows].
#pragma once

#include <cstdint>

#include "hp/kernels/registry.h"

namespace hp::kernels {

template <class T>
struct NormTable {
  // y = x · rstd · w, rstd = 1 / sqrt(mean(x²) + eps); writes rstd per row.
  void (*rms_fwd)(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t n, T eps);
  // y = (x - mean) · rstd · w + b, rstd = 1 / sqrt(var(x) + eps) (biased var); writes mean, rstd.
  void (*ln_fwd)(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows,
                 int64_t n, T eps);
  // dx (null: not wanted) is overwritten; dw (null: not wanted) is accumulated: dw += Σ_rows g·x̂.
  void (*rms_bwd)(const T* g, const T* x, const T* w, const T* rstd, T* dx, T* dw, int64_t rows,
                  int64_t n);
  // As rms_bwd, plus db += Σ_rows g (null: not wanted).
  void (*ln_bwd)(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx, T* dw,
                 T* db, int64_t rows, int64_t n);
};

HP_KERNEL_FAMILY(NormTable<float>);
// The f64 path (exact arithmetic in double) for gradient checks and f64 tensors.
const NormTable<double>& norm_table_f64();

}  // namespace hp::kernels
