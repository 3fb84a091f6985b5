#include "hp/core/dtype.h"

#include <cmath>
#include <limits>

#include "hp/core/error.h"

namespace hp {

namespace {

struct DTypeInfo {
  std::string_view name;
  size_t size;
  bool floating;
};

constexpr DTypeInfo kInfo[kNumDTypes] = {
    {"f64", 8, true},    {"f32", 4, true},    {"bf16", 2, true}, {"f16", 2, true},
    {"f8e4m3", 1, true}, {"f8e5m2", 1, true}, {"e8m0", 1, true}, {"i32", 4, false},
    {"i64", 8, false},   {"u8", 1, false},    {"bool", 1, false},
};

// A small binary float format: `mant` stored significand bits, exponent `bias`, smallest normal
// exponent 1-bias, largest finite code `max_code` (sign bit clear).
struct MiniFloat {
  int mant;
  int bias;
  uint32_t max_code;
  bool has_inf;
  uint32_t nan_code;  // canonical quiet NaN (sign clear)
  uint32_t inf_code;
};

constexpr MiniFloat kF16{10, 15, 0x7BFF, true, 0x7E00, 0x7C00};
constexpr MiniFloat kE4M3{3, 7, 0x7E, false, 0x7F, 0};
constexpr MiniFloat kE5M2{2, 15, 0x7B, true, 0x7E, 0x7C};

// Exact round-to-nearest-even encode through double arithmetic (scalings by powers of two are exact).
uint32_t encode_minifloat(float f, const MiniFloat& fmt, int total_bits, bool saturate) {
  const uint32_t sign = std::signbit(f) ? (1u << (total_bits - 1)) : 0u;
  if (std::isnan(f)) return sign | fmt.nan_code;
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) {
    if (saturate) return sign | fmt.max_code;
    return sign | (fmt.has_inf ? fmt.inf_code : fmt.nan_code);
  }
  if (a == 0.0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;             // a in [2^e, 2^(e+1))
  const int emin = 1 - fmt.bias;
  uint32_t code;
  if (e < emin) {
    // Subnormal: quantum 2^(emin - mant); q may round up to 2^mant = the smallest normal code.
    double q = std::nearbyint(std::ldexp(a, fmt.mant - emin));
    code = static_cast<uint32_t>(q);
  } else {
    double q = std::nearbyint(std::ldexp(a, fmt.mant - e));  // in [2^mant, 2^(mant+1)]
    // A carry out of the significand lands in the exponent field by plain addition.
    double c = static_cast<double>(e + fmt.bias) * std::ldexp(1.0, fmt.mant) +
               (q - std::ldexp(1.0, fmt.mant));
    if (c > static_cast<double>(fmt.max_code)) {
      if (saturate) return sign | fmt.max_code;
      return sign | (fmt.has_inf ? fmt.inf_code : fmt.nan_code);
    }
    code = static_cast<uint32_t>(c);
  }
  return sign | code;
}

float decode_minifloat(uint32_t code, const MiniFloat& fmt, int total_bits) {
  const uint32_t sign_bit = 1u << (total_bits - 1);
  const bool neg = (code & sign_bit) != 0;
  const uint32_t mag = code & (sign_bit - 1);
  const int exp_bits = total_bits - 1 - fmt.mant;
  const uint32_t exp_field = mag >> fmt.mant;
  const uint32_t man_field = mag & ((1u << fmt.mant) - 1);
  double v;
  if (fmt.has_inf && exp_field == (1u << exp_bits) - 1) {
    v = man_field ? std::numeric_limits<double>::quiet_NaN()
                  : std::numeric_limits<double>::infinity();
  } else if (!fmt.has_inf && mag > fmt.max_code) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp_field == 0) {
    v = std::ldexp(static_cast<double>(man_field), 1 - fmt.bias - fmt.mant);
  } else {
    v = std::ldexp(static_cast<double>(man_field | (1u << fmt.mant)),
                   static_cast<int>(exp_field) - fmt.bias - fmt.mant);
  }
  return static_cast<float>(neg ? -v : v);
}

}  // namespace

size_t dtype_size(DType dt) { return kInfo[static_cast<int>(dt)].size; }
std::string_view dtype_name(DType dt) { return kInfo[static_cast<int>(dt)].name; }
bool is_floating(DType dt) { return kInfo[static_cast<int>(dt)].floating; }

DType dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  HP_THROW(ValueError, "dtype", "unknown dtype '", name,
           "' (expected f64, f32, bf16, f16, f8e4m3, f8e5m2, e8m0, i32, i64, u8, bool)");
}

float f16_to_f32(uint16_t h) { return decode_minifloat(h, kF16, 16); }
uint16_t f32_to_f16(float f) { return static_cast<uint16_t>(encode_minifloat(f, kF16, 16, false)); }

float fp8_to_f32(uint8_t code, Fp8Kind kind) {
  return decode_minifloat(code, kind == Fp8Kind::e4m3 ? kE4M3 : kE5M2, 8);
}

uint8_t f32_to_fp8(float f, Fp8Kind kind, bool saturate) {
  return static_cast<uint8_t>(
      encode_minifloat(f, kind == Fp8Kind::e4m3 ? kE4M3 : kE5M2, 8, saturate));
}

float e8m0_to_f32(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(bits) - 127));
}

uint8_t f32_to_e8m0(float f) {
  if (!(f > 0.0f) || std::isinf(f)) return 0xFF;
  int e;
  double m = std::frexp(static_cast<double>(f), &e);  // f = m * 2^e, m in [0.5, 1)
  e -= 1;                                             // f = (2m) * 2^e, 2m in [1, 2)
  if (2.0 * m >= 1.5) e += 1;
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return static_cast<uint8_t>(e + 127);
}

double load_as_double(const void* p, DType dt) {
  switch (dt) {
    case DType::f64: return *static_cast<const double*>(p);
    case DType::f32: return *static_cast<const float*>(p);
    case DType::bf16: return bf16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::f16: return f16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::f8e4m3: return fp8_to_f32(*static_cast<const uint8_t*>(p), Fp8Kind::e4m3);
    case DType::f8e5m2: return fp8_to_f32(*static_cast<const uint8_t*>(p), Fp8Kind::e5m2);
    case DType::e8m0: return e8m0_to_f32(*static_cast<const uint8_t*>(p));
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::u8: return *static_cast<const uint8_t*>(p);
    case DType::boolean: return *static_cast<const uint8_t*>(p) ? 1.0 : 0.0;
  }
  HP_CHECK(false, "bad dtype");
}

void store_from_double(void* p, DType dt, double v) {
  switch (dt) {
    case DType::f64: *static_cast<double*>(p) = v; return;
    case DType::f32: *static_cast<float*>(p) = static_cast<float>(v); return;
    case DType::bf16: *static_cast<uint16_t*>(p) = f32_to_bf16(static_cast<float>(v)); return;
    case DType::f16: *static_cast<uint16_t*>(p) = f32_to_f16(static_cast<float>(v)); return;
    case DType::f8e4m3:
      *static_cast<uint8_t*>(p) = f32_to_fp8(static_cast<float>(v), Fp8Kind::e4m3);
      return;
    case DType::f8e5m2:
      *static_cast<uint8_t*>(p) = f32_to_fp8(static_cast<float>(v), Fp8Kind::e5m2);
      return;
    case DType::e8m0: *static_cast<uint8_t*>(p) = f32_to_e8m0(static_cast<float>(v)); return;
    case DType::i32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v); return;
    case DType::i64: *static_cast<int64_t*>(p) = static_cast<int64_t>(v); return;
    case DType::u8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v); return;
    case DType::boolean: *static_cast<uint8_t*>(p) = v != 0.0; return;
  }
  HP_CHECK(false, "bad dtype");
}

}  // namespace hp
