// The SIMD abstraction every vector kernel is written against.
//
// Included only by ISA translation units (*_avx512.cpp, *_avx2.cpp, and the portable *_scalar.cpp),
// each of which first defines HP_ISA to its namespace name. The compile flags of that TU select
// which `Arch` this header defines: 16 floats per register (AVX-512), 8 (AVX2+FMA) or 1 (portable).
// Kernels are templates on nothing: they use `Arch` of their own ISA namespace, so the same source
// yields all three paths, and no inline function is shared between TUs of different ISAs.
// The vector ISAs also give i32 lanes (I, masks MI) with byte / bf16 loads and stores: the MX
// quantizer's bit-exact encoding (mx/kernels_impl.h) is written against them.
//
// Keep std containers out of ISA TUs: their inline functions would be compiled with the TU's ISA
// and could be picked by the linker for callers on machines without it.
#pragma once

#ifndef HP_ISA
#error "define HP_ISA (the ISA namespace) before including simd_arch.h"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "hp/kernels/cpu/scalar_arch.h"
#include "hp/kernels/cpu/simd_math.h"

namespace hp::kernels::HP_ISA {

#if defined(__AVX512F__)
struct Prims {
  static constexpr int W = 16;
  using V = __m512;
  using M = __mmask16;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a*b+c
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V sqrt(V a) { return _mm512_sqrt_ps(a); }
  static V abs(V a) { return _mm512_abs_ps(a); }
  static V neg(V a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static M lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M ge(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static M eq(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M isnan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }  // m ? a : b
  // 2^n for integral-valued n in [-126, 127].
  static V pow2i(V n) {
    __m512i i = _mm512_cvtps_epi32(n);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(i, _mm512_set1_epi32(127)), 23));
  }
  // p · 2^n for integral-valued n: one instruction (vscalefps); exact where the result is normal.
  static V ldexp(V p, V n) { return _mm512_scalef_ps(p, n); }
  // x = m * 2^e with m in [1, 2): returns m, sets e (as float). x > 0, normal.
  static V frexp1(V x, V* e) {
    __m512i b = _mm512_castps_si512(x);
    *e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(127)));
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0x007FFFFF)), _mm512_set1_epi32(0x3F800000)));
  }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }

  // Integer lanes (i32) and the byte / bf16 movement the MX quantizer needs (mx/kernels_impl.h).
  using I = __m512i;
  using MI = __mmask16;  // a mask over i32 lanes (the same k-mask type as M here)
  static V load_bf16(const uint16_t* p) {
    const I w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static I load_u8(const uint8_t* p) {  // W bytes → i32 lanes
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_i32(const int32_t* p) { return _mm512_loadu_si512(p); }
  static void store_i32(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void store_u8(uint8_t* p, I v) {  // the low byte of each lane
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
  }
  static void store_u16(uint16_t* p, I v) {  // the low half of each lane
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  }
  // 2W bf16 values as two f32 vectors in the lane order of the 16-bit unpacks (per 128-bit block k:
  // a = x[8k, 8k+4), b = x[8k+4, 8k+8)); store_u16x2 packs that order back. See the AVX2 version.
  static void load_bf16x2(const uint16_t* p, V* a, V* b) {
    const I v = _mm512_loadu_si512(p), z = _mm512_setzero_si512();
    *a = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v));
    *b = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v));
  }
  static void store_u16x2(uint16_t* p, I a, I b) {  // low halves (0..65535), load_bf16x2's order
    _mm512_storeu_si512(p, _mm512_packus_epi32(a, b));
  }
  // 2W 16-bit values zero-extended to i32 lanes in load_bf16x2's order (store_u16x2 packs them back).
  static void load_u16x2(const uint16_t* p, I* a, I* b) {
    const I v = _mm512_loadu_si512(p), z = _mm512_setzero_si512();
    *a = _mm512_unpacklo_epi16(v, z);
    *b = _mm512_unpackhi_epi16(v, z);
  }
  static I load_u16(const uint16_t* p) {  // W 16-bit values → i32 lanes, in order
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // Table lookups, one instruction per W lanes: t[idx] (f32), and the 16-bit t[idx] as i32 lanes
  // (it reads t[idx + 1] too: the table needs one element of padding).
  static V gather(const float* t, I idx) { return _mm512_i32gather_ps(idx, t, 4); }
  static I gather_u16(const uint16_t* t, I idx) {
    return _mm512_and_si512(_mm512_i32gather_epi32(idx, t, 2), _mm512_set1_epi32(0xFFFF));
  }
  static MI unord(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }  // NaN lanes
  // 2W f16 values as two f32 vectors (exact) and back, rounded to nearest even (F16C), in order.
  static void load_f16x2(const uint16_t* p, V* a, V* b) {
    *a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    *b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  static void store_f16x2(uint16_t* p, V a, V b) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
  }
  // 32 bytes from the low bytes of 32 / W vectors; non-temporal when asked and aligned.
  static void store_bytes32(uint8_t* p, const I* c, bool nt = false) {
    __m128i* q = reinterpret_cast<__m128i*>(p);
    if (nt && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
      _mm_stream_si128(q, _mm512_cvtepi32_epi8(c[0]));
      _mm_stream_si128(q + 1, _mm512_cvtepi32_epi8(c[1]));
    } else {
      _mm_storeu_si128(q, _mm512_cvtepi32_epi8(c[0]));
      _mm_storeu_si128(q + 1, _mm512_cvtepi32_epi8(c[1]));
    }
  }
  static void fence() { _mm_sfence(); }  // orders non-temporal stores
  static I seti(int32_t v) { return _mm512_set1_epi32(v); }
  static I bits(V v) { return _mm512_castps_si512(v); }
  static V floats(I v) { return _mm512_castsi512_ps(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I max(I a, I b) { return _mm512_max_epi32(a, b); }
  static I min(I a, I b) { return _mm512_min_epi32(a, b); }
  template <int n>
  static I srli(I a) {
    return _mm512_srli_epi32(a, n);
  }
  template <int n>
  static I slli(I a) {
    return _mm512_slli_epi32(a, n);
  }
  static MI lt_mask(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static MI gt(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static I select(MI m, I a, I b) { return _mm512_mask_blend_epi32(m, b, a); }  // m ? a : b
  static int mask_bits(MI m) { return static_cast<int>(m); }  // one bit per lane
  static int32_t hmax(I v) { return _mm512_reduce_max_epi32(v); }
  // Lane j of the result = max over the lanes of v[j] (W vectors), by per-vector reductions.
  static I reduce_lanes(const I* v) {
    alignas(64) int32_t out[16];
    for (int j = 0; j < 16; ++j) out[j] = _mm512_reduce_max_epi32(v[j]);
    return _mm512_load_si512(out);
  }
  static int32_t first(I v) { return _mm_cvtsi128_si32(_mm512_castsi512_si128(v)); }
  static float first(V v) { return _mm512_cvtss_f32(v); }
};
#elif defined(__AVX2__)
struct Prims {
  static constexpr int W = 8;
  using V = __m256;
  using M = __m256;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static V neg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static M lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static M eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M isnan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static V select(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
  static V pow2i(V n) {
    __m256i i = _mm256_cvtps_epi32(n);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(i, _mm256_set1_epi32(127)), 23));
  }
  static V ldexp(V p, V n) { return _mm256_mul_ps(p, pow2i(n)); }  // n in [-126, 127]
  static V frexp1(V x, V* e) {
    __m256i b = _mm256_castps_si256(x);
    *e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(127)));
    return _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x3F800000)));
  }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Integer lanes (i32) and the byte / bf16 movement the MX quantizer needs (mx/kernels_impl.h).
  using I = __m256i;
  using MI = __m256i;  // all-ones / all-zeros i32 lanes
  static V load_bf16(const uint16_t* p) {
    const I w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static I load_u8(const uint8_t* p) {  // W bytes → i32 lanes
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p)); }
  static void store_i32(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<I*>(p), v); }
  // The low byte of each lane: after the packs, dword 0 of each 128-bit half holds 4 bytes.
  static void store_u8(uint8_t* p, I v) {
    const I b = _mm256_packus_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
    const I lo = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(lo));
  }
  static void store_u16(uint16_t* p, I v) {  // the low half of each lane
    const I packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  // 2W bf16 values as two f32 vectors, in the lane order the 16-bit unpacks give: a = x0-3 x8-11,
  // b = x4-7 x12-15 (unpacking with zero puts each value in the top half of a lane: its f32 bits).
  // One shuffle per 8 values, no cross-half permute; elementwise code does not care about the
  // order, and store_u16x2's pack (per 128-bit half: a's 4 lanes, then b's) restores it.
  static void load_bf16x2(const uint16_t* p, V* a, V* b) {
    const I v = _mm256_loadu_si256(reinterpret_cast<const I*>(p)), z = _mm256_setzero_si256();
    *a = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
    *b = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
  }
  static void store_u16x2(uint16_t* p, I a, I b) {  // low halves (0..65535), load_bf16x2's order
    _mm256_storeu_si256(reinterpret_cast<I*>(p), _mm256_packus_epi32(a, b));
  }
  static MI unord(V a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }  // NaN lanes
  // 2W f16 values as two f32 vectors (exact) and back, rounded to nearest even (F16C), in order.
  static void load_f16x2(const uint16_t* p, V* a, V* b) {
    *a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
  static void store_f16x2(uint16_t* p, V a, V b) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
  }
  // 32 bytes from the low bytes (values 0..255) of 32 / W vectors; non-temporal when asked and
  // aligned. The two packs interleave 128-bit halves; the dword permute restores element order:
  // bytes [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] → a0-7 b0-7 c0-7 d0-7.
  static void store_bytes32(uint8_t* p, const I* c, bool nt = false) {
    const I ab = _mm256_packs_epi32(c[0], c[1]);
    const I cd = _mm256_packs_epi32(c[2], c[3]);
    const I bytes = _mm256_packus_epi16(ab, cd);
    const I fixed = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (nt && (reinterpret_cast<uintptr_t>(p) & 31) == 0)
      _mm256_stream_si256(reinterpret_cast<I*>(p), fixed);
    else
      _mm256_storeu_si256(reinterpret_cast<I*>(p), fixed);
  }
  static void fence() { _mm_sfence(); }  // orders non-temporal stores
  static I seti(int32_t v) { return _mm256_set1_epi32(v); }
  static I bits(V v) { return _mm256_castps_si256(v); }
  static V floats(I v) { return _mm256_castsi256_ps(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I max(I a, I b) { return _mm256_max_epi32(a, b); }
  static I min(I a, I b) { return _mm256_min_epi32(a, b); }
  template <int n>
  static I srli(I a) {
    return _mm256_srli_epi32(a, n);
  }
  template <int n>
  static I slli(I a) {
    return _mm256_slli_epi32(a, n);
  }
  static MI lt_mask(V a, V b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static MI gt(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  static I select(MI m, I a, I b) { return _mm256_blendv_epi8(b, a, m); }  // m ? a : b
  static int mask_bits(MI m) { return _mm256_movemask_ps(_mm256_castsi256_ps(m)); }
  static int32_t hmax(I v) {
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1));
    return _mm_cvtsi128_si32(m);
  }
  // Lane j of the result = max over the lanes of v[j] (W vectors): max-reduce pairs within 128-bit
  // halves (unpack 32, then 64), then fold the halves across (permute2x128).
  static I reduce_lanes(const I* v) {
    I a[4], b[2];
    for (int k = 0; k < 4; ++k)
      a[k] = _mm256_max_epi32(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                              _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; ++k)
      b[k] = _mm256_max_epi32(_mm256_unpacklo_epi64(a[2 * k], a[2 * k + 1]),
                              _mm256_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
    return _mm256_max_epi32(_mm256_permute2x128_si256(b[0], b[1], 0x20),
                            _mm256_permute2x128_si256(b[0], b[1], 0x31));
  }
  static int32_t first(I v) { return _mm_cvtsi128_si32(_mm256_castsi256_si128(v)); }
  static float first(V v) { return _mm256_cvtss_f32(v); }
};
#endif

#if defined(__AVX2__) || defined(__AVX512F__)
// Vector math (exp, log, tanh, Φ) built from the primitives; see simd_math.h for accuracy.
struct Arch : Prims {
  static constexpr bool kExactMath = false;
  // Always inlined, as the functions themselves (simd_math.h): GCC otherwise called exp out of
  // line from the AVX2 f32 silu loop once the loop body became a lambda (run_steps), 17% slower.
  HP_MATH_INLINE static V exp(V x) { return vec_exp<Prims>(x); }
  HP_MATH_INLINE static V log(V x) { return vec_log<Prims>(x); }
  HP_MATH_INLINE static V tanh(V x) { return vec_tanh<Prims>(x); }
  HP_MATH_INLINE static V norm_cdf(V x) { return vec_norm_cdf<Prims>(x); }

  // f32 lanes → bf16 bits in the low half of each i32 lane: round to nearest even (add 0x7FFF +
  // the lsb of the kept half), a NaN keeps its top bits with the quiet bit set — hp::f32_to_bf16
  // bit for bit. The eager converters, the bf16 elementwise kernels and the MX dequantizer use it.
  static I to_bf16(V f) {
    const I u = bits(f);
    const I hi = srli<16>(u);
    const I r = srli<16>(Prims::add(u, Prims::add(seti(0x7FFF), and_(hi, seti(1)))));
    return select(unord(f), or_(hi, seti(0x40)), r);
  }
  static void store_bf16(uint16_t* p, V f) { store_u16(p, to_bf16(f)); }
  // 2W values in load_bf16x2's lane order.
  static void store_bf16x2(uint16_t* p, V a, V b) { store_u16x2(p, to_bf16(a), to_bf16(b)); }
};
#else
using Arch = ScalarArch<float>;
#endif

}  // namespace hp::kernels::HP_ISA
