// Width-generic MX quantization kernels, written once against the shared SIMD seam
// (kernels/cpu/simd_arch.h: `A` = that ISA's Arch, its f32 lanes V and i32 lanes I) and compiled
// once per instruction set. Include this from an ISA translation unit after defining HP_ISA
// (the ISA namespace name) and `hp::mx::detail::HP_ISA::A`, then kernels_impl_dequant.h
// (decode, and the kernel table); everything lands in that namespace, so the copies built with
// different -m flags never merge at link time. No include guard on purpose.
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

#ifndef HP_ISA
#error "define HP_ISA before including kernels_impl.h"
#endif

namespace hp::mx::detail::HP_ISA {

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

constexpr int kN = 32 / A::W;  // vectors per block of 32

using F = A::V;
using I = A::I;
using M = A::MI;

template <bool kBf16>
inline F load(const void* base, int64_t idx) {
  if constexpr (kBf16)
    return A::load_bf16(static_cast<const uint16_t*>(base) + idx);
  else
    return A::load(static_cast<const float*>(base) + idx);
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
  return A::and_(A::bits(v), A::seti(0x7FFFFFFF));
}

// Lanes whose block holds NaN or Inf (amax bits above the largest finite f32).
inline M bad_lanes(I amax_bits) {
  return A::gt(amax_bits, A::seti(0x7F7FFFFF));
}

// Per-lane block scale from amax bits. The bad-lane mask is not a member: g++ 12.2 at -O1 with
// -fsanitize=signed-integer-overflow,null,pointer-overflow miscompiled a __mmask16 member beside
// the two zmm members (reading it returned the first lane of `inv`, 0x43000000), which marked
// every dual-axis row block bad in the sanitizer build. Callers take bad_lanes() directly.
struct Scale {
  I byte;  // E8M0 byte, 0xFF for bad lanes
  F inv;   // 1 / scale
};

template <class Fm, bool kRceil>
inline Scale make_scale(I amax_bits) {
  I biased = A::sub(A::srli<23>(amax_bits), A::seti(Fm::emax));
  if constexpr (kRceil) {
    M up = A::gt(A::and_(amax_bits, A::seti(0x7FFFFF)), A::seti(0x600000));
    biased = A::add(biased, A::select(up, A::seti(1), A::seti(0)));
  }
  biased = A::min(A::max(biased, A::seti(0)), A::seti(254));
  Scale s;
  s.byte = A::select(bad_lanes(amax_bits), A::seti(0xFF), biased);
  s.inv = A::floats(A::slli<23>(A::sub(A::seti(254), biased)));
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
  F a = A::mul(ax, inv);
  if constexpr (kSat) a = A::min(a, A::floats(A::seti(Fm::max_normal_bits)));
  const I e = A::max(A::and_(A::bits(a), A::seti(0x7F800000)), A::seti(Fm::min_normal_bits));
  const F magic = A::floats(A::add(e, A::seti((23 - Fm::mant) << 23)));
  const F r = A::sub(A::add(a, magic), magic);
  const I code = A::srli<Fm::shift>(A::bits(A::mul(r, A::floats(A::seti(Fm::encode_mul_bits)))));
  return A::or_(code, sign);
}

inline F abs_f(F v) {
  return A::floats(abs_bits(v));
}
inline I sign_byte(F v) {
  return A::and_(A::srli<24>(A::bits(v)), A::seti(0x80));
}

// Encodes one block of 32 at x with a broadcast scale; writes 32 codes.
template <class Fm, bool kSat, bool kBf16>
inline void encode_block(const void* x, int64_t idx, F inv, uint8_t* codes, bool nt) {
  I c[kN];
  for (int i = 0; i < kN; ++i) {
    const F v = load<kBf16>(x, idx + i * A::W);
    c[i] = encode<Fm, kSat>(abs_f(v), inv, sign_byte(v));
  }
  A::store_bytes32(codes, c, nt);
}

inline void fill_nan(uint8_t* codes) {
  for (int i = 0; i < 32; ++i) codes[i] = 0x7F;
}

// Amax bits of one block of 32.
template <bool kBf16>
inline I block_amax(const void* x, int64_t idx) {
  I m = abs_bits(load<kBf16>(x, idx));
  for (int i = 1; i < kN; ++i) m = A::max(m, abs_bits(load<kBf16>(x, idx + i * A::W)));
  return m;
}

// Row-wise blocks, kWidth blocks at a time: their amax vectors reduce into one vector whose lanes
// are the blocks, so one make_scale serves kWidth blocks.
template <class Fm, bool kRceil, bool kBf16>
void row_blocks(const void* x, int64_t nblocks, uint8_t* codes, uint8_t* scales, bool nt) {
  constexpr bool kSat = !kRceil;
  int64_t b = 0;
  for (; b + A::W <= nblocks; b += A::W) {
    I m[A::W];
    for (int j = 0; j < A::W; ++j) m[j] = block_amax<kBf16>(x, (b + j) * 32);
    const I amax = A::reduce_lanes(m);
    const Scale s = make_scale<Fm, kRceil>(amax);
    A::store_u8(scales + b, s.byte);
    alignas(64) float inv[A::W];
    A::store(inv, s.inv);
    for (int j = 0; j < A::W; ++j)
      encode_block<Fm, kSat, kBf16>(x, (b + j) * 32, A::set1(inv[j]), codes + (b + j) * 32, nt);
    if (const int bad = A::mask_bits(bad_lanes(amax)))
      for (int j = 0; j < A::W; ++j)
        if (bad >> j & 1) fill_nan(codes + (b + j) * 32);
  }
  for (; b < nblocks; ++b) {
    const I amax = A::seti(A::hmax(block_amax<kBf16>(x, b * 32)));
    const Scale s = make_scale<Fm, kRceil>(amax);
    scales[b] = static_cast<uint8_t>(A::first(s.byte));
    if (A::mask_bits(bad_lanes(amax)))
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
      const int64_t v = c0 / A::W + i;
      const Scale s = make_scale<Fm, kRceil>(m[v]);
      inv[v] = s.inv;
      bad[v] = bad_lanes(m[v]);
      any_bad |= A::mask_bits(bad[v]);
      bytes[i] = s.byte;
    }
    A::store_bytes32(scales + c0, bytes);
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
        const int64_t v = c0 / A::W + i;
        const F val = load<kBf16>(x, r * ldx + v * A::W);
        c[i] = encode<Fm, !kRceil>(abs_f(val), inv[v], sign_byte(val));
        if constexpr (kAnyBad) c[i] = A::select(bad[v], A::seti(0x7F), c[i]);
      }
      A::store_bytes32(codes + r * ldc + c0, c, nt);
    }
}

template <class Fm, bool kRceil, bool kBf16>
void col_tile(const void* x, int64_t ldx, int64_t ncols, uint8_t* codes, int64_t ldc,
              uint8_t* scales, bool nt) {
  constexpr int64_t kMaxV = kMaxTileCols / A::W;
  const int64_t nv = ncols / A::W;
  I m[kMaxV];  // per-column amax bits
  for (int64_t v = 0; v < nv; ++v) m[v] = A::seti(0);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c0 = 0; c0 < ncols; c0 += 32) {
      prefetch_block<kBf16>(x, (r + 2) * ldx + c0);
      for (int i = 0; i < kN; ++i) {
        const int64_t v = c0 / A::W + i;
        m[v] = A::max(m[v], abs_bits(load<kBf16>(x, r * ldx + v * A::W)));
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
    for (; b + A::W <= nb; b += A::W) {
      const I amax = A::load_i32(row_amax + r * nb + b);
      const Scale s = make_scale<Fm, kRceil>(amax);
      const M bad = bad_lanes(amax);
      A::store_u8(row_scales + r * lds + b, s.byte);
      A::store(row_inv + r * nb + b, s.inv);
      A::store_i32(row_bad + r * nb + b, A::select(bad, A::seti(-1), A::seti(0)));
      any_bad |= A::mask_bits(bad);
    }
    for (; b < nb; ++b) {
      const I amax = A::seti(row_amax[r * nb + b]);
      const Scale s = make_scale<Fm, kRceil>(amax);
      row_scales[r * lds + b] = static_cast<uint8_t>(A::first(s.byte));
      row_inv[r * nb + b] = A::first(s.inv);
      row_bad[r * nb + b] = A::mask_bits(bad_lanes(amax)) ? -1 : 0;
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
      const F rinv = A::set1(row_inv[r * nb + b]);
      I rc[kN], cc[kN];
      for (int i = 0; i < kN; ++i) {
        const int64_t v = b * kN + i;
        const F val = load<kBf16>(x, r * ldx + v * A::W);
        const F ax = abs_f(val);
        const I sign = sign_byte(val);
        rc[i] = encode<Fm, !kRceil>(ax, rinv, sign);
        cc[i] = encode<Fm, !kRceil>(ax, inv[v], sign);
        if constexpr (kAnyBad) {
          rc[i] = A::select(A::gt(A::seti(0), A::seti(row_bad[r * nb + b])), A::seti(0x7F), rc[i]);
          cc[i] = A::select(bad[v], A::seti(0x7F), cc[i]);
        }
      }
      A::store_bytes32(row_codes + r * ldc + b * 32, rc, nt);
      A::store_bytes32(col_codes + r * ldc + b * 32, cc, nt);
    }
}

template <class Fm, bool kRceil, bool kBf16>
void dual_tile(const void* x, int64_t ldx, int64_t ncols, uint8_t* row_codes, uint8_t* col_codes,
               int64_t ldc, uint8_t* row_scales, int64_t lds, uint8_t* col_scales_out, bool nt) {
  constexpr int64_t kMaxV = kMaxTileCols / A::W, kMaxB = kMaxTileCols / 32;
  const int64_t nv = ncols / A::W, nb = ncols / 32;
  I m[kMaxV];                                // per-column amax bits
  alignas(64) int32_t row_amax[32 * kMaxB];  // [32 rows, nb] row-block amax bits
  for (int64_t v = 0; v < nv; ++v) m[v] = A::seti(0);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t b0 = 0; b0 < nb; b0 += A::W) {
      // Up to kWidth row blocks, reduced together into one vector of block amaxes.
      const int64_t n = nb - b0 < A::W ? nb - b0 : A::W;
      I bm[A::W];
      for (int j = 0; j < A::W; ++j) bm[j] = A::seti(0);
      for (int64_t j = 0; j < n; ++j) {
        prefetch_block<kBf16>(x, (r + 2) * ldx + (b0 + j) * 32);
        for (int i = 0; i < kN; ++i) {
          const int64_t v = (b0 + j) * kN + i;
          const I a = abs_bits(load<kBf16>(x, r * ldx + v * A::W));
          m[v] = A::max(m[v], a);
          bm[j] = A::max(bm[j], a);
        }
      }
      alignas(64) int32_t lanes[A::W];
      A::store_i32(lanes, A::reduce_lanes(bm));
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
  if (nt) A::fence();
}

void quant_col_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                    uint8_t* codes, int64_t ldc, uint8_t* scales, int nt) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    col_tile<decltype(fm), r.value, b.value>(x, ldx, ncols, codes, ldc, scales, nt);
  });
  if (nt) A::fence();
}

void quant_dual_tile(const void* x, int in_bf16, int64_t ldx, int64_t ncols, int elem, int mode,
                     uint8_t* row_codes, uint8_t* col_codes, int64_t ldc, uint8_t* row_scales,
                     int64_t lds, uint8_t* col_scales_out, int nt) {
  dispatch(elem, mode, in_bf16, [&](auto fm, auto r, auto b) {
    dual_tile<decltype(fm), r.value, b.value>(x, ldx, ncols, row_codes, col_codes, ldc, row_scales,
                                              lds, col_scales_out, nt);
  });
  if (nt) A::fence();
}

}  // namespace hp::mx::detail::HP_ISA
