// Width-generic MX dequantization kernels and the ISA kernel table; the second half of
// kernels_impl.h, included right after it by each ISA translation unit (same rules: HP_MX_ISA and
// V defined, no include guard on purpose).

#ifndef HP_MX_ISA
#error "include kernels_impl.h first"
#endif

namespace hp::mx::detail::HP_MX_ISA {

// FP8 code lanes → f32 lanes. Placing the code's exponent and significand at the f32 field
// positions and multiplying by 2^(127 - bias) rebiases normals and turns the f32 subnormals that
// FP8 subnormals become into exact values.
template <class Fm>
inline F decode(I c) {
  const I mag = V::and_(c, V::set1(0x7F));
  const I sign = V::slli<24>(V::and_(c, V::set1(0x80)));
  const F val = V::mul(V::floats(V::slli<Fm::shift>(mag)), V::floats(V::set1(Fm::decode_mul_bits)));
  I special;
  if constexpr (Fm::has_inf)  // 0x7C → Inf, 0x7D-0x7F → the canonical quiet NaN
    special = V::select(V::gt(mag, V::set1(0x7C)), V::set1(0x7FC00000), V::set1(0x7F800000));
  else
    special = V::set1(0x7FC00000);
  const I out = V::select(V::gt(mag, V::set1(Fm::max_code)), special, V::bits(val));
  return V::floats(V::or_(out, sign));
}

// E8M0 byte lanes → f32 scale lanes: byte << 23, except 0 (2^-127, subnormal) and 0xFF (NaN).
inline F decode_scale(I b) {
  I s = V::select(V::gt(b, V::set1(0)), V::slli<23>(b), V::set1(0x00400000));
  s = V::select(V::gt(b, V::set1(254)), V::set1(0x7FC00000), s);
  return V::floats(s);
}

// f32 → bf16 round to nearest even; NaN stays a quiet NaN (matches hp::f32_to_bf16).
inline I to_bf16(F y) {
  const I u = V::bits(y);
  const I r = V::srli<16>(V::add(u, V::add(V::set1(0x7FFF), V::and_(V::srli<16>(u), V::set1(1)))));
  const M nan = V::gt(V::and_(u, V::set1(0x7FFFFFFF)), V::set1(0x7F800000));
  return V::select(nan, V::or_(V::srli<16>(u), V::set1(0x40)), r);
}

template <class Fm, bool kBf16Out>
void dequant_n(const uint8_t* codes, const uint8_t* scales, int scale_shift, int64_t n, void* out) {
  for (int64_t i = 0; i < n; i += V::kWidth) {
    const I sb = scale_shift == 0 ? V::load_u8(scales + i) : V::set1(scales[i >> scale_shift]);
    const F y = V::mul(decode<Fm>(V::load_u8(codes + i)), decode_scale(sb));
    if constexpr (kBf16Out)
      V::store_u16(static_cast<uint16_t*>(out) + i, to_bf16(y));
    else
      V::store_f32(static_cast<float*>(out) + i, y);
  }
}

void dequant(const uint8_t* codes, const uint8_t* scales, int scale_shift, int64_t n, int elem,
             void* out, int out_bf16) {
  dispatch(elem, 0, out_bf16, [&](auto fm, auto, auto b) {
    dequant_n<decltype(fm), b.value>(codes, scales, scale_shift, n, out);
  });
}

constexpr Kernels kTable{HP_MX_ISA_NAME, quant_row_blocks, quant_col_tile, quant_dual_tile,
                         dequant};

const Kernels& kernels() {
  return kTable;
}

}  // namespace hp::mx::detail::HP_MX_ISA
