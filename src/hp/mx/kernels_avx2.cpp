// AVX2 (+FMA, F16C) instantiation of the width-generic MX kernels: 8 f32 lanes, vector masks.
#include <immintrin.h>

#include "hp/mx/kernels.h"

namespace hp::mx::detail::avx2 {

struct V {
  static constexpr int kWidth = 8;
  using F = __m256;
  using I = __m256i;
  using M = __m256i;  // all-ones / all-zeros lanes

  static F load_f32(const float* p) { return _mm256_loadu_ps(p); }
  static F load_bf16(const uint16_t* p) {
    const I w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static I load_u8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p)); }
  static void store_f32(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store_i32(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<I*>(p), v); }
  // 8 lanes of 0..255 → 8 bytes: after the packs, dword 0 of each 128-bit half holds 4 bytes.
  static void store_u8(uint8_t* p, I v) {
    const I b = _mm256_packus_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
    const I lo = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(lo));
  }
  static void store_u16(uint16_t* p, I v) {
    const I packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  // Lane values are 0..255. The two packs interleave 128-bit halves; the dword permute restores
  // element order: bytes [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] → a0-7 b0-7 c0-7 d0-7.
  static void store_codes(uint8_t* p, const I* c, bool nt = false) {
    const I ab = _mm256_packs_epi32(c[0], c[1]);
    const I cd = _mm256_packs_epi32(c[2], c[3]);
    const I bytes = _mm256_packus_epi16(ab, cd);
    const I fixed = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (nt && (reinterpret_cast<uintptr_t>(p) & 31) == 0)
      _mm256_stream_si256(reinterpret_cast<I*>(p), fixed);
    else
      _mm256_storeu_si256(reinterpret_cast<I*>(p), fixed);
  }
  static void fence() { _mm_sfence(); }

  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static I bits(F v) { return _mm256_castps_si256(v); }
  static F floats(I v) { return _mm256_castsi256_ps(v); }
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
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static F subf(F a, F b) { return _mm256_sub_ps(a, b); }
  static F minf(F a, F b) { return _mm256_min_ps(a, b); }
  static M ltf(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static M gt(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  static I select(M m, I a, I b) { return _mm256_blendv_epi8(b, a, m); }
  static int32_t hmax(I v) {
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1));
    return _mm_cvtsi128_si32(m);
  }
  // Lane j of the result = max over the lanes of v[j]: max-reduce pairs within 128-bit halves
  // (unpack 32, then 64), then fold the halves across (permute2x128).
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
  static int mask_bits(M m) { return _mm256_movemask_ps(_mm256_castsi256_ps(m)); }
  static int32_t first(I v) { return _mm_cvtsi128_si32(_mm256_castsi256_si128(v)); }
  static float first_f(F v) { return _mm256_cvtss_f32(v); }
};

}  // namespace hp::mx::detail::avx2

#define HP_MX_ISA avx2
#define HP_MX_ISA_NAME "avx2"
#include "hp/mx/kernels_impl.h"
#include "hp/mx/kernels_impl_dequant.h"
