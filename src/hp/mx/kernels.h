// The ISA-level MX kernels behind quantize.h: one table of plain function pointers per instruction
// set (scalar reference, AVX2, AVX-512), a kernel family of kernels/registry.h. Kernels see only
// whole 32-element blocks and whole 32×32 tiles; the drivers in quantize.cpp zero-pad partial
// blocks into local buffers, split work across threads and validate arguments. This header is
// included by the ISA translation units, so it defines no inline functions and no std containers
// (registry.h's are never called there; docs/ARCHITECTURE.md §3, one definition per ISA namespace).
#pragma once

#include <cstdint>

#include "hp/kernels/registry.h"

namespace hp::mx::detail {

// Widest panel (columns) the column-wise and dual kernels take in one call.
constexpr int64_t kMaxTileCols = 1024;

// elem: 0 = e4m3, 1 = e5m2. mode: 0 = floor, 1 = rceil. in_bf16 / out_bf16: element type is bf16
// (raw uint16 bits) instead of f32. nt: write codes with non-temporal stores where aligned (for
// outputs far larger than the caches; the kernel fences before returning).
struct Kernels {
  // x: `nblocks` contiguous blocks of 32 elements. codes [nblocks * 32], scales [nblocks].
  void (*quant_row_blocks)(const void* x, int in_bf16, int64_t nblocks, int elem, int mode,
                           uint8_t* codes, uint8_t* scales, int nt);
  // x: a tile of 32 rows × ncols (ncols % 32 == 0, <= kMaxTileCols), row stride ldx elements;
  // column-wise blocks. codes: 32 rows, row stride ldc bytes. scales [ncols].
  void (*quant_col_tile)(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                         uint8_t* codes, int64_t ldc, uint8_t* scales, int nt);
  // Both axes from one read of a 32 × ncols tile (ncols % 32 == 0, <= kMaxTileCols). row_codes /
  // col_codes: row stride ldc bytes. row_scales: 32 rows × ncols/32, row stride lds bytes.
  // col_scales [ncols].
  void (*quant_dual_tile)(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem,
                          int mode, uint8_t* row_codes, uint8_t* col_codes, int64_t ldc,
                          uint8_t* row_scales, int64_t lds, uint8_t* col_scales, int nt);
  // Decode n elements (n % 32 == 0); element i uses scales[i >> scale_shift] (5: one scale per
  // block of 32, row-wise; 0: one scale per element, a row of a column-wise tensor).
  void (*dequant)(const uint8_t* codes, const uint8_t* scales, int scale_shift, int64_t n, int elem,
                  void* out, int out_bf16);
};

}  // namespace hp::mx::detail

namespace hp::kernels {
HP_KERNEL_FAMILY(mx::detail::Kernels);
}  // namespace hp::kernels
