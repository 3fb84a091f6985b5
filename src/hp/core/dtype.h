// Element types and scalar conversions.
//
// bf16 and f16 round to nearest even. The FP8 formats follow the OCP FP8 / ml_dtypes semantics:
// f8e4m3 is E4M3FN (no Inf, NaN = 0x7F/0xFF, max 448) and f8e5m2 is IEEE-like (Inf 0x7C/0xFC,
// max 57344). A plain cast overflows to NaN (e4m3) or Inf (e5m2) as ml_dtypes and PyTorch do; the
// MX quantizers saturate explicitly. e8m0 is the MX scale: 2^(bits-127), 0xFF = NaN, no zero.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace hp {

enum class DType : uint8_t { f64, f32, bf16, f16, f8e4m3, f8e5m2, e8m0, i32, i64, u8, boolean };
inline constexpr int kNumDTypes = 11;

// Bytes per element.
size_t dtype_size(DType dt);
// Canonical short name ("f32", "bf16", ...).
std::string_view dtype_name(DType dt);
// Inverse of dtype_name; throws ValueError naming the string.
DType dtype_from_name(std::string_view name);
// f64, f32, bf16, f16, f8e4m3, f8e5m2, e8m0.
bool is_floating(DType dt);

// Storage types for the narrow formats: raw bits, converted through float.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};
struct f8e4m3 {
  uint8_t bits;
};
struct f8e5m2 {
  uint8_t bits;
};
struct e8m0 {
  uint8_t bits;
};

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

enum class Fp8Kind : uint8_t { e4m3, e5m2 };
float fp8_to_f32(uint8_t code, Fp8Kind kind);
// Round to nearest even. Overflow: saturate ? ±max normal : (e4m3 NaN, e5m2 ±Inf).
uint8_t f32_to_fp8(float f, Fp8Kind kind, bool saturate = false);

float e8m0_to_f32(uint8_t bits);
// Nearest power of two (1.5·2^e rounds up); NaN, Inf, zero and negatives map to 0xFF (NaN);
// values beyond the range clamp to 2^-127 / 2^127.
uint8_t f32_to_e8m0(float f);

// C++ element type → DType.
template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<f8e4m3>() { return DType::f8e4m3; }
template <> constexpr DType dtype_of<f8e5m2>() { return DType::f8e5m2; }
template <> constexpr DType dtype_of<e8m0>() { return DType::e8m0; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

// Element → double / double → element, for generic (slow) paths: printing, item(), tests.
double load_as_double(const void* p, DType dt);
void store_from_double(void* p, DType dt, double v);

}  // namespace hp
