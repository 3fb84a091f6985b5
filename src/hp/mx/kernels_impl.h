// Width-generic MX quantization kernels, written once against a vector-traits struct `V` and
// compiled once per instruction set. Include this from an ISA translation unit after defining
// HP_MX_ISA (the ISA namespace name) and `hp::mx::detail::HP_MX_ISA::V`, then
// kernels_impl_dequant.h (decode, and the kernel table); everything lands in that namespace, so the
// copies built with different -m flags never merge at link time. No include guard on purpose.
//
// V provides: kWidth (lanes); F (f32 lanes), I (i32 lanes), M (lane mask); load_f32, load_bf16,
// load_u8 (kWidth bytes → i32 lanes), store_f32, store_u16 (low halves of i32 lanes), store_u8
// (low bytes of i32 lanes), store_codes (32 bytes from the low bytes of 32 / kWidth i32 vectors;
// non-temporal when asked and aligned), fence (orders non-temporal stores);
// set1, set1f, bits, floats, and_, or_, add, sub, max, min, srli<n>, slli<n>, mul, addf, minf, ltf,
// gt, select (mask ? a : b), mask_bits (one bit per lane), hmax, reduce_lanes (lane j of the result
// = max over the lanes of input vector j, for kWidth vectors), first (lane 0).
//
// Encoding (all lanes exact, no float rounding besides the one intended):
//   scale   amax bits A: biased = (A >> 23) - emax [+1 when rceil and A's significand > 1.75],
//           clamped to [0, 254]; 1/scale = f32 with exponent field 254 - biased (never 0, since a
//           finite amax gives biased <= 247). A >= 0x7F800000 (NaN/Inf) marks the block bad.
//   element y = |x| * (1/scale) is exact (a power-of-two product; results below 2^-126 are far
//           under half the FP8 subnormal quantum and encode as ±0 either way). floor clamps to max
//           normal (saturation); rceil needs no clamp, as amax / scale <= max normal. Normals round
//           the f32 significand to mant bits (RNE by adding 0x7FF..+lsb) and rebias; subnormals add
//           the magic 2^(emin - mant + 23), whose ULP is the FP8 subnormal quantum, so the f32
//           adder does the RNE and the low bits are the code.

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
  static constexpr int encode_mul_bits = kBias << 23;          // 2^(bias - 127)
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

// Prefetches the cache lines of the 32 elements at base[idx]. The panel kernels call it two rows
// ahead: each row of a panel is a separate 2-4 KiB stream that crosses a page, which the hardware
// prefetchers pick up late. Past the last panel that address lies beyond the input (a prefetch
// never faults), so it is computed in integers: a pointer that far out of its array would be
// undefined behaviour the optimizer may assume away.
template <bool kBf16>
inline void prefetch_block(const void* base, int64_t idx) {
  const uintptr_t p =
      reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(idx * (kBf16 ? 2 : 4));
  __builtin_prefetch(reinterpret_cast<const void*>(p));
  if constexpr (!kBf16) __builtin_prefetch(reinterpret_cast<const void*>(p + 64));
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

// One vector of |x| (ax) and its sign bits (0x80 per lane) → codes, ignoring NaN/Inf (the callers
// overwrite bad blocks). The FPU does the rounding: adding M = 2^(e + 23 - mant), with e the
// exponent of a clamped below at emin, makes ulp(M) the FP8 quantum at a's binade (the subnormal
// quantum below emin), so (a + M) - M is a rounded to FP8 precision, ties to even, carries
// included. Scaling that value by 2^(bias - 127) puts it in f32 with the FP8 exponent bias (FP8
// subnormals become exact f32 subnormals), and its bits >> (23 - mant) are the code.
template <class Fm, bool kSat>
inline I encode(F ax, F inv, I sign) {
  F a = V::mul(ax, inv);
  if constexpr (kSat) a = V::minf(a, V::floats(V::set1(Fm::max_normal_bits)));
  const I e = V::max(V::and_(V::bits(a), V::set1(0x7F800000)), V::set1(Fm::min_normal_bits));
  const F magic = V::floats(V::add(e, V::set1((23 - Fm::mant) << 23)));
  const F r = V::subf(V::addf(a, magic), magic);
  const I code = V::srli<Fm::shift>(V::bits(V::mul(r, V::floats(V::set1(Fm::encode_mul_bits)))));
  return V::or_(code, sign);
}

inline F abs_f(F v) {
  return V::floats(abs_bits(v));
}
inline I sign_byte(F v) {
  return V::and_(V::srli<24>(V::bits(v)), V::set1(0x80));
}

// Encodes one block of 32 at x with a broadcast scale; writes 32 codes.
template <class Fm, bool kSat, bool kBf16>
inline void encode_block(const void* x, int64_t idx, F inv, uint8_t* codes, bool nt) {
  I c[kN];
  for (int i = 0; i < kN; ++i) {
    const F v = load<kBf16>(x, idx + i * V::kWidth);
    c[i] = encode<Fm, kSat>(abs_f(v), inv, sign_byte(v));
  }
  V::store_codes(codes, c, nt);
}

inline void fill_nan(uint8_t* codes) {
  for (int i = 0; i < 32; ++i) codes[i] = 0x7F;
}

// Amax bits of one block of 32.
template <bool kBf16>
inline I block_amax(const void* x, int64_t idx) {
  I m = abs_bits(load<kBf16>(x, idx));
  for (int i = 1; i < kN; ++i) m = V::max(m, abs_bits(load<kBf16>(x, idx + i * V::kWidth)));
  return m;
}

// Row-wise blocks, kWidth blocks at a time: their amax vectors reduce into one vector whose lanes
// are the blocks, so one make_scale serves kWidth blocks.
template <class Fm, bool kRceil, bool kBf16>
void row_blocks(const void* x, int64_t nblocks, uint8_t* codes, uint8_t* scales, bool nt) {
  constexpr bool kSat = !kRceil;
  int64_t b = 0;
  for (; b + V::kWidth <= nblocks; b += V::kWidth) {
    I m[V::kWidth];
    for (int j = 0; j < V::kWidth; ++j) m[j] = block_amax<kBf16>(x, (b + j) * 32);
    const Scale s = make_scale<Fm, kRceil>(V::reduce_lanes(m));
    V::store_u8(scales + b, s.byte);
    alignas(64) float inv[V::kWidth];
    V::store_f32(inv, s.inv);
    for (int j = 0; j < V::kWidth; ++j)
      encode_block<Fm, kSat, kBf16>(x, (b + j) * 32, V::set1f(inv[j]), codes + (b + j) * 32, nt);
    if (const int bad = V::mask_bits(s.bad))
      for (int j = 0; j < V::kWidth; ++j)
        if (bad >> j & 1) fill_nan(codes + (b + j) * 32);
  }
  for (; b < nblocks; ++b) {
    const Scale s = make_scale<Fm, kRceil>(V::set1(V::hmax(block_amax<kBf16>(x, b * 32))));
    scales[b] = static_cast<uint8_t>(V::first(s.byte));
    if (V::mask_bits(s.bad))
      fill_nan(codes + b * 32);
    else
      encode_block<Fm, kSat, kBf16>(x, b * 32, s.inv, codes + b * 32, nt);
  }
}

// Column-wise scales of a 32-row panel from per-column amax bits m [ncols / kWidth]. Returns
// whether any column block holds NaN/Inf.
template <class Fm, bool kRceil>
inline bool panel_col_scales(const I* m, int64_t ncols, F* inv, M* bad, uint8_t* scales) {
  int any_bad = 0;
  for (int64_t c0 = 0; c0 < ncols; c0 += 32) {
    I bytes[kN];
    for (int i = 0; i < kN; ++i) {
      const int64_t v = c0 / V::kWidth + i;
      const Scale s = make_scale<Fm, kRceil>(m[v]);
      inv[v] = s.inv;
      bad[v] = s.bad;
      any_bad |= V::mask_bits(s.bad);
      bytes[i] = s.byte;
    }
    V::store_codes(scales + c0, bytes);
  }
  return any_bad != 0;
}

// Both panel kernels walk the 32 rows in order, each row left to right, so the hardware sees 32
// long sequential streams instead of 32 interleaved 128-byte hops; the second pass re-reads the
// panel (32 × up to kMaxTileCols elements, <= 128 KiB) from L2 and prefetches the panel to its
// right, so the next call's first pass does not start from DRAM. Bad (NaN/Inf) blocks are rare, so
// the blend that forces their codes to 0x7F is compiled into a separate instantiation.
template <class Fm, bool kRceil, bool kBf16, bool kAnyBad>
void col_pass2(const void* x, int64_t ldx, int64_t ncols, const F* inv, const M* bad,
               uint8_t* codes, int64_t ldc, bool nt) {
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c0 = 0; c0 < ncols; c0 += 32) {
      prefetch_block<kBf16>(x, r * ldx + ncols + c0);  // the panel to the right
      I c[kN];
      for (int i = 0; i < kN; ++i) {
        const int64_t v = c0 / V::kWidth + i;
        const F val = load<kBf16>(x, r * ldx + v * V::kWidth);
        c[i] = encode<Fm, !kRceil>(abs_f(val), inv[v], sign_byte(val));
        if constexpr (kAnyBad) c[i] = V::select(bad[v], V::set1(0x7F), c[i]);
      }
      V::store_codes(codes + r * ldc + c0, c, nt);
    }
}

template <class Fm, bool kRceil, bool kBf16>
void col_tile(const void* x, int64_t ldx, int64_t ncols, uint8_t* codes, int64_t ldc,
              uint8_t* scales, bool nt) {
  constexpr int64_t kMaxV = kMaxTileCols / V::kWidth;
  const int64_t nv = ncols / V::kWidth;
  I m[kMaxV];  // per-column amax bits
  for (int64_t v = 0; v < nv; ++v) m[v] = V::set1(0);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c0 = 0; c0 < ncols; c0 += 32) {
      prefetch_block<kBf16>(x, (r + 2) * ldx + c0);
      for (int i = 0; i < kN; ++i) {
        const int64_t v = c0 / V::kWidth + i;
        m[v] = V::max(m[v], abs_bits(load<kBf16>(x, r * ldx + v * V::kWidth)));
      }
    }
  F inv[kMaxV];
  M bad[kMaxV];
  if (panel_col_scales<Fm, kRceil>(m, ncols, inv, bad, scales))
    col_pass2<Fm, kRceil, kBf16, true>(x, ldx, ncols, inv, bad, codes, ldc, nt);
  else
    col_pass2<Fm, kRceil, kBf16, false>(x, ldx, ncols, inv, bad, codes, ldc, nt);
}

// Row-block scales of the dual panel from amax bits row_amax [32 rows, nb], kWidth blocks at a
// time.
template <class Fm, bool kRceil>
inline bool dual_row_scales(const int32_t* row_amax, int64_t nb, float* row_inv, int32_t* row_bad,
                            uint8_t* row_scales, int64_t lds) {
  int any_bad = 0;
  for (int64_t r = 0; r < 32; ++r) {
    int64_t b = 0;
    for (; b + V::kWidth <= nb; b += V::kWidth) {
      const Scale s = make_scale<Fm, kRceil>(V::load_i32(row_amax + r * nb + b));
      V::store_u8(row_scales + r * lds + b, s.byte);
      V::store_f32(row_inv + r * nb + b, s.inv);
      V::store_i32(row_bad + r * nb + b, V::select(s.bad, V::set1(-1), V::set1(0)));
      any_bad |= V::mask_bits(s.bad);
    }
    for (; b < nb; ++b) {
      const Scale s = make_scale<Fm, kRceil>(V::set1(row_amax[r * nb + b]));
      row_scales[r * lds + b] = static_cast<uint8_t>(V::first(s.byte));
      row_inv[r * nb + b] = V::first_f(s.inv);
      row_bad[r * nb + b] = V::mask_bits(s.bad) ? -1 : 0;
      any_bad |= row_bad[r * nb + b];
    }
  }
  return any_bad != 0;
}

template <class Fm, bool kRceil, bool kBf16, bool kAnyBad>
void dual_pass2(const void* x, int64_t ldx, int64_t nb, const F* inv, const M* bad,
                const float* row_inv, const int32_t* row_bad, uint8_t* row_codes,
                uint8_t* col_codes, int64_t ldc, bool nt) {
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_block<kBf16>(x, r * ldx + (nb + b) * 32);  // the panel to the right
      const F rinv = V::set1f(row_inv[r * nb + b]);
      I rc[kN], cc[kN];
      for (int i = 0; i < kN; ++i) {
        const int64_t v = b * kN + i;
        const F val = load<kBf16>(x, r * ldx + v * V::kWidth);
        const F ax = abs_f(val);
        const I sign = sign_byte(val);
        rc[i] = encode<Fm, !kRceil>(ax, rinv, sign);
        cc[i] = encode<Fm, !kRceil>(ax, inv[v], sign);
        if constexpr (kAnyBad) {
          rc[i] = V::select(V::gt(V::set1(0), V::set1(row_bad[r * nb + b])), V::set1(0x7F), rc[i]);
          cc[i] = V::select(bad[v], V::set1(0x7F), cc[i]);
        }
      }
      V::store_codes(row_codes + r * ldc + b * 32, rc, nt);
      V::store_codes(col_codes + r * ldc + b * 32, cc, nt);
    }
}

template <class Fm, bool kRceil, bool kBf16>
void dual_tile(const void* x, int64_t ldx, int64_t ncols, uint8_t* row_codes, uint8_t* col_codes,
               int64_t ldc, uint8_t* row_scales, int64_t lds, uint8_t* col_scales_out, bool nt) {
  constexpr int64_t kMaxV = kMaxTileCols / V::kWidth, kMaxB = kMaxTileCols / 32;
  const int64_t nv = ncols / V::kWidth, nb = ncols / 32;
  I m[kMaxV];                                // per-column amax bits
  alignas(64) int32_t row_amax[32 * kMaxB];  // [32 rows, nb] row-block amax bits
  for (int64_t v = 0; v < nv; ++v) m[v] = V::set1(0);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t b0 = 0; b0 < nb; b0 += V::kWidth) {
      // Up to kWidth row blocks, reduced together into one vector of block amaxes.
      const int64_t n = nb - b0 < V::kWidth ? nb - b0 : V::kWidth;
      I bm[V::kWidth];
      for (int j = 0; j < V::kWidth; ++j) bm[j] = V::set1(0);
      for (int64_t j = 0; j < n; ++j) {
        prefetch_block<kBf16>(x, (r + 2) * ldx + (b0 + j) * 32);
        for (int i = 0; i < kN; ++i) {
          const int64_t v = (b0 + j) * kN + i;
          const I a = abs_bits(load<kBf16>(x, r * ldx + v * V::kWidth));
          m[v] = V::max(m[v], a);
          bm[j] = V::max(bm[j], a);
        }
      }
      alignas(64) int32_t lanes[V::kWidth];
      V::store_i32(lanes, V::reduce_lanes(bm));
      for (int64_t j = 0; j < n; ++j) row_amax[r * nb + b0 + j] = lanes[j];
    }
  F inv[kMaxV];
  M bad[kMaxV];
  alignas(64) float row_inv[32 * kMaxB];
  alignas(64) int32_t row_bad[32 * kMaxB];
  const bool col_bad = panel_col_scales<Fm, kRceil>(m, ncols, inv, bad, col_scales_out);
  const bool rows_bad =
      dual_row_scales<Fm, kRceil>(row_amax, nb, row_inv, row_bad, row_scales, lds);
  if (col_bad || rows_bad)
    dual_pass2<Fm, kRceil, kBf16, true>(x, ldx, nb, inv, bad, row_inv, row_bad, row_codes,
                                        col_codes, ldc, nt);
  else
    dual_pass2<Fm, kRceil, kBf16, false>(x, ldx, nb, inv, bad, row_inv, row_bad, row_codes,
                                         col_codes, ldc, nt);
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
                      uint8_t* codes, uint8_t* scales, int nt) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    row_blocks<decltype(fm), r.value, b.value>(x, nblocks, codes, scales, nt);
  });
  if (nt) V::fence();
}

void quant_col_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                    uint8_t* codes, int64_t ldc, uint8_t* scales, int nt) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    col_tile<decltype(fm), r.value, b.value>(x, ldx, ncols, codes, ldc, scales, nt);
  });
  if (nt) V::fence();
}

void quant_dual_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                     uint8_t* row_codes, uint8_t* col_codes, int64_t ldc, uint8_t* row_scales,
                     int64_t lds, uint8_t* col_scales_out, int nt) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    dual_tile<decltype(fm), r.value, b.value>(x, ldx, ncols, row_codes, col_codes, ldc, row_scales,
                                              lds, col_scales_out, nt);
  });
  if (nt) V::fence();
}

}  // namespace hp::mx::detail::HP_MX_ISA
