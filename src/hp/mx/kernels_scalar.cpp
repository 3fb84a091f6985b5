// Scalar MX kernels: the reference block quantizer from format.h behind the ISA kernel table, for
// CPUs without AVX2 and as the baseline the SIMD tables are tested against.
#define HP_ISA scalar
#include "hp/core/dtype.h"
#include "hp/mx/format.h"
#include "hp/mx/kernels.h"

namespace hp::mx::detail {

namespace {

QuantSpec spec_of(int elem, int mode) {
  return {elem ? ElemFormat::e5m2 : ElemFormat::e4m3, mode ? ScaleMode::rceil : ScaleMode::floor};
}

// Loads `n` elements with stride `ld` into a contiguous f32 block.
void load_block(const void* x, int in_bf16, int64_t start, int64_t ld, float* out) {
  for (int64_t i = 0; i < kBlockSize; ++i) {
    const int64_t idx = start + i * ld;
    out[i] = in_bf16 ? bf16_to_f32(static_cast<const uint16_t*>(x)[idx])
                     : static_cast<const float*>(x)[idx];
  }
}

void quant_row_blocks(const void* x, int in_bf16, int64_t nblocks, int elem, int mode,
                      uint8_t* codes, uint8_t* scales, int /*nt*/) {
  float buf[kBlockSize];
  for (int64_t b = 0; b < nblocks; ++b) {
    load_block(x, in_bf16, b * kBlockSize, 1, buf);
    scales[b] =
        quantize_block_ref(buf, kBlockSize, 1, spec_of(elem, mode), codes + b * kBlockSize, 1);
  }
}

void quant_col_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                    uint8_t* codes, int64_t ldc, uint8_t* scales, int /*nt*/) {
  float buf[kBlockSize];
  for (int64_t c = 0; c < ncols; ++c) {
    load_block(x, in_bf16, c, ldx, buf);
    scales[c] = quantize_block_ref(buf, kBlockSize, 1, spec_of(elem, mode), codes + c, ldc);
  }
}

void quant_dual_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                     uint8_t* row_codes, uint8_t* col_codes, int64_t ldc, uint8_t* row_scales,
                     int64_t lds, uint8_t* col_scales, int nt) {
  for (int64_t r = 0; r < kBlockSize; ++r) {
    const char* row = static_cast<const char*>(x) + r * ldx * (in_bf16 ? 2 : 4);
    quant_row_blocks(row, in_bf16, ncols / kBlockSize, elem, mode, row_codes + r * ldc,
                     row_scales + r * lds, nt);
  }
  quant_col_tile(x, in_bf16, ldx, ncols, elem, mode, col_codes, ldc, col_scales, nt);
}

void dequant(const uint8_t* codes, const uint8_t* scales, int scale_shift, int64_t n, int elem,
             void* out, int out_bf16) {
  const ElemFormat fmt = elem ? ElemFormat::e5m2 : ElemFormat::e4m3;
  for (int64_t i = 0; i < n; ++i) {
    // Exact: a code value times a power of two is representable in f32 (down to its subnormals).
    const float y = decode_elem(codes[i], fmt) * scale_to_f32(scales[i >> scale_shift]);
    if (out_bf16)
      static_cast<uint16_t*>(out)[i] = f32_to_bf16(y);
    else
      static_cast<float*>(out)[i] = y;
  }
}

constexpr Kernels kTable{quant_row_blocks, quant_col_tile, quant_dual_tile, dequant};

}  // namespace

}  // namespace hp::mx::detail

HP_KERNEL_ENTRY(hp::mx::detail::Kernels, hp::mx::detail::kTable);
