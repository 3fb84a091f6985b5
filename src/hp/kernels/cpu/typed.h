// Typed element access for the non-SIMD kernels (index, max/topk, dropout): a compute type per
// storage type and a dispatch from DType to a storage type. Not for ISA translation units.
#pragma once

#include <cstdint>

#include "hp/core/dtype.h"
#include "hp/core/error.h"

namespace hp::kernels::detail {

// Compute type of a storage type: f64 stays f64, everything narrower computes in f32.
template <class T>
struct Compute {
  using type = T;
  static type load(T v) { return v; }
  static T store(type v) { return static_cast<T>(v); }
};
template <>
struct Compute<bf16> {
  using type = float;
  static float load(bf16 v) { return bf16_to_f32(v.bits); }
  static bf16 store(float v) { return bf16{f32_to_bf16(v)}; }
};
template <>
struct Compute<f16> {
  using type = float;
  static float load(f16 v) { return f16_to_f32(v.bits); }
  static f16 store(float v) { return f16{f32_to_f16(v)}; }
};

// Calls fn(T{}) with the storage type of a float dtype (f64, f32, bf16, f16); throws otherwise.
template <class Fn>
void dispatch_float(DType dt, const char* op, Fn&& fn) {
  switch (dt) {
    case DType::f64:
      fn(double{});
      return;
    case DType::f32:
      fn(float{});
      return;
    case DType::bf16:
      fn(bf16{});
      return;
    case DType::f16:
      fn(f16{});
      return;
    default:
      HP_THROW(ValueError, op, "expects f64/f32/bf16/f16, got ", dtype_name(dt));
  }
}

// As dispatch_float, plus i32 and i64 (additive ops on integer tensors).
template <class Fn>
void dispatch_arith(DType dt, const char* op, Fn&& fn) {
  switch (dt) {
    case DType::i32:
      fn(int32_t{});
      return;
    case DType::i64:
      fn(int64_t{});
      return;
    default:
      dispatch_float(dt, op, fn);
  }
}

// Reads element i of an i32/i64 index tensor's raw data.
inline int64_t load_index(const void* base, DType dt, int64_t i) {
  return dt == DType::i64 ? static_cast<const int64_t*>(base)[i]
                          : static_cast<const int32_t*>(base)[i];
}

}  // namespace hp::kernels::detail
