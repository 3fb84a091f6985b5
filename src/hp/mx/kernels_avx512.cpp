// AVX-512 (F/BW/VL/DQ) instantiation of the width-generic MX kernels: 16 f32 lanes, k-masks.
// Built everywhere; quantize.cpp selects it only when the CPU has AVX-512 and HP_MX_ISA allows it.
// GCC 12 flags its own _mm512_undefined_* placeholders inside the AVX-512 intrinsic headers as
// maybe-uninitialized (a known false positive); silence that one warning for this file only.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "hp/mx/kernels.h"

namespace hp::mx::detail::avx512 {

struct V {
  static constexpr int kWidth = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;

  static F load_f32(const float* p) { return _mm512_loadu_ps(p); }
  static F load_bf16(const uint16_t* p) {
    const I w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static I load_u8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_i32(const int32_t* p) { return _mm512_loadu_si512(p); }
  static void store_f32(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store_i32(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void store_u8(uint8_t* p, I v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
  }
  static void store_u16(uint16_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  }
  static void store_codes(uint8_t* p, const I* c, bool nt = false) {
    __m128i* q = reinterpret_cast<__m128i*>(p);
    if (nt && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
      _mm_stream_si128(q, _mm512_cvtepi32_epi8(c[0]));
      _mm_stream_si128(q + 1, _mm512_cvtepi32_epi8(c[1]));
    } else {
      _mm_storeu_si128(q, _mm512_cvtepi32_epi8(c[0]));
      _mm_storeu_si128(q + 1, _mm512_cvtepi32_epi8(c[1]));
    }
  }
  static void fence() { _mm_sfence(); }

  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static I bits(F v) { return _mm512_castps_si512(v); }
  static F floats(I v) { return _mm512_castsi512_ps(v); }
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
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static F subf(F a, F b) { return _mm512_sub_ps(a, b); }
  static F minf(F a, F b) { return _mm512_min_ps(a, b); }
  static M ltf(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static I select(M m, I a, I b) { return _mm512_mask_blend_epi32(m, b, a); }
  static int32_t hmax(I v) { return _mm512_reduce_max_epi32(v); }
  // Lane j of the result = max over the lanes of v[j]. Plain per-vector reductions: simple and
  // obviously right, as this path is not yet exercised on AVX-512 hardware.
  static I reduce_lanes(const I* v) {
    alignas(64) int32_t out[16];
    for (int j = 0; j < 16; ++j) out[j] = _mm512_reduce_max_epi32(v[j]);
    return _mm512_load_si512(out);
  }
  static int mask_bits(M m) { return static_cast<int>(m); }
  static int32_t first(I v) { return _mm_cvtsi128_si32(_mm512_castsi512_si128(v)); }
  static float first_f(F v) { return _mm512_cvtss_f32(v); }
};

}  // namespace hp::mx::detail::avx512

#define HP_MX_ISA avx512
#define HP_MX_ISA_NAME "avx512"
#include "hp/mx/kernels_impl.h"
#include "hp/mx/kernels_impl_dequant.h"
