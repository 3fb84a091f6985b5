// MXFP8 formats (OCP MX v1.0, docs/ARCHITECTURE.md §4): E4M3 / E5M2 elements, one E8M0 scale per
// block of 32.
//
// Scalar codecs and the scalar reference block quantizer. The SIMD kernels (quantize.h) must agree
// with these bit for bit; tests and the fixture script check that.
//
// Rules, exactly as docs/ARCHITECTURE.md §4 states them:
//   scale  floor: 2^(floor(log2 amax) - emax_elem), elements above max normal saturate.
//          rceil: 2^ceil(log2(amax / max_normal)), nothing saturates.
//          The exponent is clamped to [-127, 127]; scale byte = exponent + 127.
//   element  x / scale, round to nearest even, saturate to ±max normal (never NaN from overflow).
//   all-zero block  scale byte 0, codes 0 (−0 stays 0x80).
//   NaN or Inf anywhere in a block  scale byte 0xFF and every code 0x7F.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "hp/core/enum_names.h"

namespace hp::mx {

// Elements per MX block along the quantization axis.
inline constexpr int64_t kBlockSize = 32;
// E8M0 NaN; also the scale of a block holding NaN or Inf.
inline constexpr uint8_t kScaleNaN = 0xFF;
// The code written for every element of a NaN/Inf block (a NaN in both formats).
inline constexpr uint8_t kElemNaN = 0x7F;

enum class ElemFormat : uint8_t { e4m3, e5m2 };
// Its spellings in the config and messages (core/enum_names.h).
std::span<const EnumName<ElemFormat>> enum_names(ElemFormat);
enum class ScaleMode : uint8_t { floor, rceil };
// Its spellings in the config and messages (core/enum_names.h).
std::span<const EnumName<ScaleMode>> enum_names(ScaleMode);

// What to quantize to; the default is the recipe docs/ARCHITECTURE.md §4 names (rceil, E4M3).
struct QuantSpec {
  ElemFormat elem = ElemFormat::e4m3;
  ScaleMode scale_mode = ScaleMode::rceil;
};

// Constants of an element format (docs/ARCHITECTURE.md §4 table).
struct FormatInfo {
  int mant_bits;        // stored significand bits
  int bias;             // exponent bias
  int emax;             // exponent of the largest normal (emax_elem)
  uint8_t max_code;     // largest finite code, sign clear
  float max_normal;     // 448 / 57344
  float min_normal;     // 2^-6 / 2^-14
  float min_subnormal;  // 2^-9 / 2^-16
};

const FormatInfo& format_info(ElemFormat fmt);
std::string_view elem_format_name(ElemFormat fmt);  // "e4m3" / "e5m2"
std::string_view scale_mode_name(ScaleMode mode);   // "floor" / "rceil"

// Element encode of an already scaled value: round to nearest even, saturate to ±max normal
// (±Inf saturates too), NaN → 0x7F, −0 → 0x80.
uint8_t encode_elem(float v, ElemFormat fmt);
// Element decode: E4M3 0x7F/0xFF → NaN; E5M2 0x7C/0xFC → ±Inf, 0x7D-0x7F/0xFD-0xFF → NaN.
float decode_elem(uint8_t code, ElemFormat fmt);

// Unbiased scale exponent for a block whose largest magnitude is `amax` (finite, >= 0), clamped to
// [-127, 127]. amax = 0 gives -127 (scale byte 0).
int scale_exponent(float amax, ElemFormat fmt, ScaleMode mode);
// Scale byte for `amax`: scale_exponent + 127, or 0xFF when amax is NaN or Inf.
uint8_t scale_byte(float amax, ElemFormat fmt, ScaleMode mode);
// E8M0 decode: 2^(byte - 127) (byte 0 = 2^-127, an f32 subnormal), NaN for 0xFF.
float scale_to_f32(uint8_t byte);

namespace detail {

// Scalar reference for one block: elements x[i * stride], i < n (n <= 32), treated as zero-padded
// to 32. Writes codes[i * code_stride] for i < n and returns the scale byte. Written with double
// arithmetic and frexp, independently of the bit tricks in the SIMD kernels.
uint8_t quantize_block_ref(const float* x, int64_t n, int64_t stride, QuantSpec spec,
                           uint8_t* codes, int64_t code_stride);

// Exact element encode of v (any magnitude, already divided by the scale).
uint8_t encode_elem_exact(double v, const FormatInfo& info);

}  // namespace detail

}  // namespace hp::mx
