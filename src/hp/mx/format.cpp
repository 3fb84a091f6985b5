#include "hp/mx/format.h"

#include <cmath>
#include <limits>

namespace hp::mx {

namespace {

constexpr FormatInfo kE4M3{3, 7, 8, 0x7E, 448.0f, 0x1p-6f, 0x1p-9f};
constexpr FormatInfo kE5M2{2, 15, 15, 0x7B, 57344.0f, 0x1p-14f, 0x1p-16f};

}  // namespace

const FormatInfo& format_info(ElemFormat fmt) {
  return fmt == ElemFormat::e4m3 ? kE4M3 : kE5M2;
}

std::string_view elem_format_name(ElemFormat fmt) {
  return fmt == ElemFormat::e4m3 ? "e4m3" : "e5m2";
}

std::string_view scale_mode_name(ScaleMode mode) {
  return mode == ScaleMode::floor ? "floor" : "rceil";
}

namespace detail {

uint8_t encode_elem_exact(double v, const FormatInfo& info) {
  if (std::isnan(v)) return kElemNaN;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);
  if (a >= static_cast<double>(info.max_normal)) return sign | info.max_code;  // saturate (and Inf)
  if (a == 0.0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;             // a in [2^e, 2^(e+1))
  const int emin = 1 - info.bias;
  const double one = std::ldexp(1.0, info.mant_bits);
  if (e < emin) {
    // Subnormal quantum 2^(emin - mant); rounding up to 2^mant lands on the smallest normal code.
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, info.mant_bits - emin)));
  }
  const double q = std::nearbyint(std::ldexp(a, info.mant_bits - e));  // in [2^mant, 2^(mant+1)]
  // A carry out of the significand moves into the exponent field by plain addition.
  const double c = static_cast<double>(e + info.bias) * one + (q - one);
  return sign | static_cast<uint8_t>(std::fmin(c, static_cast<double>(info.max_code)));
}

}  // namespace detail

uint8_t encode_elem(float v, ElemFormat fmt) {
  return detail::encode_elem_exact(static_cast<double>(v), format_info(fmt));
}

float decode_elem(uint8_t code, ElemFormat fmt) {
  const FormatInfo& info = format_info(fmt);
  const bool neg = (code & 0x80) != 0;
  const int mag = code & 0x7F;
  double v;
  if (mag > info.max_code) {
    v = (fmt == ElemFormat::e5m2 && mag == 0x7C) ? std::numeric_limits<double>::infinity()
                                                 : std::numeric_limits<double>::quiet_NaN();
  } else {
    const int exp_field = mag >> info.mant_bits;
    const int man_field = mag & ((1 << info.mant_bits) - 1);
    v = exp_field == 0
            ? std::ldexp(man_field, 1 - info.bias - info.mant_bits)
            : std::ldexp(man_field | (1 << info.mant_bits), exp_field - info.bias - info.mant_bits);
  }
  return static_cast<float>(neg ? -v : v);
}

int scale_exponent(float amax, ElemFormat fmt, ScaleMode mode) {
  const FormatInfo& info = format_info(fmt);
  if (!(amax > 0.0f)) return -127;
  int e;
  std::frexp(static_cast<double>(amax), &e);
  const int floor_log2 = e - 1;  // exact for f32 subnormals too
  int s = floor_log2 - info.emax;
  // rceil: amax / max_normal lies in (2^(s-1), 2^(s+1)), so the ceiling is s or s + 1.
  if (mode == ScaleMode::rceil && static_cast<double>(amax) > std::ldexp(info.max_normal, s)) ++s;
  return s < -127 ? -127 : (s > 127 ? 127 : s);
}

uint8_t scale_byte(float amax, ElemFormat fmt, ScaleMode mode) {
  if (std::isnan(amax) || std::isinf(amax)) return kScaleNaN;
  return static_cast<uint8_t>(scale_exponent(amax, fmt, mode) + 127);
}

float scale_to_f32(uint8_t byte) {
  if (byte == kScaleNaN) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(byte) - 127);
}

namespace detail {

uint8_t quantize_block_ref(const float* x, int64_t n, int64_t stride, QuantSpec spec,
                           uint8_t* codes, int64_t code_stride) {
  float amax = 0.0f;
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i * stride];
    if (std::isnan(v) || std::isinf(v)) bad = true;
    amax = std::fmax(amax, std::fabs(v));
  }
  if (bad) {
    for (int64_t i = 0; i < n; ++i) codes[i * code_stride] = kElemNaN;
    return kScaleNaN;
  }
  const FormatInfo& info = format_info(spec.elem);
  const int s = scale_exponent(amax, spec.elem, spec.scale_mode);
  for (int64_t i = 0; i < n; ++i)
    codes[i * code_stride] =
        encode_elem_exact(std::ldexp(static_cast<double>(x[i * stride]), -s), info);
  return static_cast<uint8_t>(s + 127);
}

}  // namespace detail

std::span<const EnumName<ElemFormat>> enum_names(ElemFormat) {
  using enum ElemFormat;
  static constexpr EnumName<ElemFormat> names[] = {{"e4m3", e4m3}, {"e5m2", e5m2}};
  return names;
}

std::span<const EnumName<ScaleMode>> enum_names(ScaleMode) {
  using enum ScaleMode;
  static constexpr EnumName<ScaleMode> names[] = {{"floor", floor}, {"rceil", rceil}};
  return names;
}

}  // namespace hp::mx
