// Width-generic MX kernels, written once against a vector-traits struct `V` and compiled once per
// instruction set. Include this from an ISA translation unit after defining HP_MX_ISA (the ISA
// namespace name) and `hp::mx::detail::HP_MX_ISA::V`; everything here lands in that namespace, so
// the copies built with different -m flags never merge at link time. No include guard on purpose.
//
// V provides: kWidth (lanes); F (f32 lanes), I (i32 lanes), M (lane mask); load_f32, load_bf16,
// load_u8 (kWidth bytes → i32 lanes), store_f32, store_u16 (low halves of i32 lanes), store_codes
// (32 bytes from the low bytes of 32 / kWidth i32 vectors); set1, set1f, bits, floats, and_, or_,
// add, sub, max, min, srli<n>, slli<n>, mul, minf, ltf, gt, select (mask ? a : b), selectf, hmax,
// first (lane 0).
//
// Encoding (all lanes exact, no float rounding besides the one intended):
//   scale   amax bits A: biased = (A >> 23) - emax [+1 when rceil and A's significand > 1.75],
//           clamped to [0, 254]; 1/scale = f32 with exponent field 254 - biased (never 0, since a
//           finite amax gives biased <= 247). A >= 0x7F800000 (NaN/Inf) marks the block bad.
//   element y = |x| * (1/scale) is exact (a power-of-two product; results below 2^-126 are far
//           under half the FP8 subnormal quantum and encode as ±0 either way). Clamp to max normal
//           (saturation); normals round the f32 significand to mant bits (RNE by adding
//           0x7FF..+lsb) and rebias; subnormals add the magic 2^(emin - mant + 23), whose ULP is
//           the FP8 subnormal quantum, so the f32 adder does the RNE and the low bits are the code.

#ifndef HP_MX_ISA
#error "define HP_MX_ISA before including kernels_impl.h"
#endif

namespace hp::mx::detail::HP_MX_ISA {

template <bool B>
struct BoolTag {
  static constexpr bool value = B;
};

// Element format constants as compile-time parameters. Both formats have a max normal significand
// of 1.75 (0x600000 in f32 significand bits).
template <int kMant, int kBias, int kEmax, int kMaxCode, bool kHasInf>
struct Fmt {
  static constexpr int mant = kMant;
  static constexpr int emax = kEmax;
  static constexpr int max_code = kMaxCode;
  static constexpr bool has_inf = kHasInf;
  static constexpr int shift = 23 - kMant;
  static constexpr int max_normal_bits = ((127 + kEmax) << 23) | 0x600000;
  static constexpr int min_normal_bits = (128 - kBias) << 23;
  static constexpr int magic_bits = (128 - kBias - kMant + 23) << 23;
  static constexpr int rebias = (127 - kBias) << kMant;
  static constexpr int decode_mul_bits = (254 - kBias) << 23;  // 2^(127 - bias)
};
using E4M3 = Fmt<3, 7, 8, 0x7E, false>;
using E5M2 = Fmt<2, 15, 15, 0x7B, true>;

constexpr int kN = 32 / V::kWidth;  // vectors per block of 32

using F = V::F;
using I = V::I;
using M = V::M;

template <bool kBf16>
inline F load(const void* base, int64_t idx) {
  if constexpr (kBf16)
    return V::load_bf16(static_cast<const uint16_t*>(base) + idx);
  else
    return V::load_f32(static_cast<const float*>(base) + idx);
}

inline I abs_bits(F v) {
  return V::and_(V::bits(v), V::set1(0x7FFFFFFF));
}

// Per-lane block scale from amax bits.
struct Scale {
  I byte;  // E8M0 byte, 0xFF for bad lanes
  F inv;   // 1 / scale
  M bad;   // NaN or Inf in the block
};

template <class Fm, bool kRceil>
inline Scale make_scale(I amax_bits) {
  I biased = V::sub(V::srli<23>(amax_bits), V::set1(Fm::emax));
  if constexpr (kRceil) {
    M up = V::gt(V::and_(amax_bits, V::set1(0x7FFFFF)), V::set1(0x600000));
    biased = V::add(biased, V::select(up, V::set1(1), V::set1(0)));
  }
  biased = V::min(V::max(biased, V::set1(0)), V::set1(254));
  Scale s;
  s.bad = V::gt(amax_bits, V::set1(0x7F7FFFFF));
  s.byte = V::select(s.bad, V::set1(0xFF), biased);
  s.inv = V::floats(V::slli<23>(V::sub(V::set1(254), biased)));
  return s;
}

template <class Fm>
inline I encode(F x, F inv, M bad) {
  const I sign = V::and_(V::srli<24>(V::bits(x)), V::set1(0x80));
  F a = V::floats(abs_bits(V::mul(x, inv)));
  a = V::minf(a, V::floats(V::set1(Fm::max_normal_bits)));
  const I u = V::bits(a);
  const I lsb = V::and_(V::srli<Fm::shift>(u), V::set1(1));
  const I rounded = V::add(u, V::add(V::set1((1 << (Fm::shift - 1)) - 1), lsb));
  const I normal = V::sub(V::srli<Fm::shift>(rounded), V::set1(Fm::rebias));
  const F magic = V::floats(V::set1(Fm::magic_bits));
  const I sub = V::sub(V::bits(V::addf(a, magic)), V::set1(Fm::magic_bits));
  const M is_sub = V::ltf(a, V::floats(V::set1(Fm::min_normal_bits)));
  const I code = V::or_(V::select(is_sub, sub, normal), sign);
  return V::select(bad, V::set1(0x7F), code);
}

template <class Fm, bool kRceil, bool kBf16>
void row_blocks(const void* x, int64_t nblocks, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < nblocks; ++b) {
    F v[kN];
    I m = V::set1(0);
    for (int i = 0; i < kN; ++i) {
      v[i] = load<kBf16>(x, b * 32 + i * V::kWidth);
      m = V::max(m, abs_bits(v[i]));
    }
    const Scale s = make_scale<Fm, kRceil>(V::set1(V::hmax(m)));
    I c[kN];
    for (int i = 0; i < kN; ++i) c[i] = encode<Fm>(v[i], s.inv, s.bad);
    V::store_codes(codes + b * 32, c);
    scales[b] = static_cast<uint8_t>(V::first(s.byte));
  }
}

// Column scales of one 32×32 sub-tile (already reduced to per-column amax bits in m).
template <class Fm, bool kRceil>
inline void col_scales(const I* m, Scale* s, uint8_t* scales) {
  I bytes[kN];
  for (int i = 0; i < kN; ++i) {
    s[i] = make_scale<Fm, kRceil>(m[i]);
    bytes[i] = s[i].byte;
  }
  V::store_codes(scales, bytes);
}

template <class Fm, bool kRceil, bool kBf16>
void col_tile(const void* x, int64_t ldx, int64_t ncols, uint8_t* codes, int64_t ldc,
              uint8_t* scales) {
  for (int64_t c0 = 0; c0 < ncols; c0 += 32) {
    I m[kN];
    for (int i = 0; i < kN; ++i) m[i] = V::set1(0);
    for (int64_t r = 0; r < 32; ++r)
      for (int i = 0; i < kN; ++i)
        m[i] = V::max(m[i], abs_bits(load<kBf16>(x, r * ldx + c0 + i * V::kWidth)));
    Scale s[kN];
    col_scales<Fm, kRceil>(m, s, scales + c0);
    // Second pass re-reads the 32×32 sub-tile from L1.
    for (int64_t r = 0; r < 32; ++r) {
      I c[kN];
      for (int i = 0; i < kN; ++i)
        c[i] = encode<Fm>(load<kBf16>(x, r * ldx + c0 + i * V::kWidth), s[i].inv, s[i].bad);
      V::store_codes(codes + r * ldc + c0, c);
    }
  }
}

template <class Fm, bool kRceil, bool kBf16>
void dual_tile(const void* x, int64_t ldx, int64_t ncols, uint8_t* row_codes, uint8_t* col_codes,
               int64_t ldc, uint8_t* row_scales, int64_t lds, uint8_t* col_scales_out) {
  for (int64_t c0 = 0; c0 < ncols; c0 += 32) {
    I m[kN];
    for (int i = 0; i < kN; ++i) m[i] = V::set1(0);
    int32_t row_amax[32];  // amax bits of each row's block in this sub-tile
    for (int64_t r = 0; r < 32; ++r) {
      I rm = V::set1(0);
      for (int i = 0; i < kN; ++i) {
        const I a = abs_bits(load<kBf16>(x, r * ldx + c0 + i * V::kWidth));
        m[i] = V::max(m[i], a);
        rm = V::max(rm, a);
      }
      row_amax[r] = V::hmax(rm);
    }
    Scale cs[kN];
    col_scales<Fm, kRceil>(m, cs, col_scales_out + c0);
    for (int64_t r = 0; r < 32; ++r) {
      const Scale rs = make_scale<Fm, kRceil>(V::set1(row_amax[r]));
      row_scales[r * lds + c0 / 32] = static_cast<uint8_t>(V::first(rs.byte));
      I rc[kN], cc[kN];
      for (int i = 0; i < kN; ++i) {
        const F v = load<kBf16>(x, r * ldx + c0 + i * V::kWidth);
        rc[i] = encode<Fm>(v, rs.inv, rs.bad);
        cc[i] = encode<Fm>(v, cs[i].inv, cs[i].bad);
      }
      V::store_codes(row_codes + r * ldc + c0, rc);
      V::store_codes(col_codes + r * ldc + c0, cc);
    }
  }
}

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

// Runtime (elem, mode, bf16) → template instantiation.
template <class Fn>
inline void dispatch(int elem, int mode, int bf16, Fn&& fn) {
  auto by_bf16 = [&](auto fm, auto rceil) {
    if (bf16)
      fn(fm, rceil, BoolTag<true>{});
    else
      fn(fm, rceil, BoolTag<false>{});
  };
  auto by_mode = [&](auto fm) {
    if (mode)
      by_bf16(fm, BoolTag<true>{});
    else
      by_bf16(fm, BoolTag<false>{});
  };
  if (elem)
    by_mode(E5M2{});
  else
    by_mode(E4M3{});
}

void quant_row_blocks(const void* x, int in_bf16, int64_t nblocks, int elem, int mode,
                      uint8_t* codes, uint8_t* scales) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    row_blocks<decltype(fm), r.value, b.value>(x, nblocks, codes, scales);
  });
}

void quant_col_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                    uint8_t* codes, int64_t ldc, uint8_t* scales) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    col_tile<decltype(fm), r.value, b.value>(x, ldx, ncols, codes, ldc, scales);
  });
}

void quant_dual_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                     uint8_t* row_codes, uint8_t* col_codes, int64_t ldc, uint8_t* row_scales,
                     int64_t lds, uint8_t* col_scales_out) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    dual_tile<decltype(fm), r.value, b.value>(x, ldx, ncols, row_codes, col_codes, ldc, row_scales,
                                              lds, col_scales_out);
  });
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
