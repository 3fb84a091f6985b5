// Width-generic MX dequantization kernels and the ISA kernel table; the second half of
// kernels_impl.h, included right after it by each ISA translation unit (same rules: HP_ISA and
// A defined, no include guard on purpose).

#ifndef HP_ISA
#error "include kernels_impl.h first"
#endif

namespace hp::mx::detail::HP_ISA {

// FP8 code lanes → f32 lanes. Placing the code's exponent and significand at the f32 field
// positions and multiplying by 2^(127 - bias) rebiases normals and turns the f32 subnormals that
// FP8 subnormals become into exact values.
template <class Fm>
inline F decode(I c) {
  const I mag = A::and_(c, A::seti(0x7F));
  const I sign = A::slli<24>(A::and_(c, A::seti(0x80)));
  const F val = A::mul(A::floats(A::slli<Fm::shift>(mag)), A::floats(A::seti(Fm::decode_mul_bits)));
  I special;
  if constexpr (Fm::has_inf)  // 0x7C → Inf, 0x7D-0x7F → the canonical quiet NaN
    special = A::select(A::gt(mag, A::seti(0x7C)), A::seti(0x7FC00000), A::seti(0x7F800000));
  else
    special = A::seti(0x7FC00000);
  const I out = A::select(A::gt(mag, A::seti(Fm::max_code)), special, A::bits(val));
  return A::floats(A::or_(out, sign));
}

// E8M0 byte lanes → f32 scale lanes: byte << 23, except 0 (2^-127, subnormal) and 0xFF (NaN).
inline F decode_scale(I b) {
  I s = A::select(A::gt(b, A::seti(0)), A::slli<23>(b), A::seti(0x00400000));
  s = A::select(A::gt(b, A::seti(254)), A::seti(0x7FC00000), s);
  return A::floats(s);
}

template <class Fm, bool kBf16Out>
void dequant_n(const uint8_t* codes, const uint8_t* scales, int scale_shift, int64_t n, void* out) {
  for (int64_t i = 0; i < n; i += A::W) {
    const I sb = scale_shift == 0 ? A::load_u8(scales + i) : A::seti(scales[i >> scale_shift]);
    const F y = A::mul(decode<Fm>(A::load_u8(codes + i)), decode_scale(sb));
    if constexpr (kBf16Out)
      A::store_bf16(static_cast<uint16_t*>(out) + i, y);
    else
      A::store(static_cast<float*>(out) + i, y);
  }
}

void dequant(const uint8_t* codes, const uint8_t* scales, int scale_shift, int64_t n, int elem,
             void* out, int out_bf16) {
  dispatch(elem, 0, out_bf16, [&](auto fm, auto, auto b) {
    dequant_n<decltype(fm), b.value>(codes, scales, scale_shift, n, out);
  });
}

constexpr Kernels kTable{quant_row_blocks, quant_col_tile, quant_dual_tile, dequant};

}  // namespace hp::mx::detail::HP_ISA

HP_KERNEL_ENTRY(hp::mx::detail::Kernels, hp::mx::detail::HP_ISA::kTable);
