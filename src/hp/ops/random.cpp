// Random factories from the counter-based generator (values independent of the thread count).
#include "hp/core/profiler.h"
#include "hp/core/random.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {
Tensor random_f32(const Shape& shape, bool normal, double a, double b) {
  HP_PROFILE_OP(normal ? "randn" : "rand");
  Tensor t = empty(shape, DType::f32);
  const int64_t n = t.numel();
  Generator& gen = default_generator();
  RngState at{gen.state().seed, gen.reserve(n)};
  if (normal) fill_normal(t.data<float>(), n, at, static_cast<float>(a), static_cast<float>(b));
  else fill_uniform(t.data<float>(), n, at, static_cast<float>(a), static_cast<float>(b));
  return t;
}

void check_float_dtype(DType dt, const char* op) {
  if (!is_floating(dt) || dt == DType::e8m0)
    HP_THROW(ValueError, op, "needs a floating dtype, got ", dtype_name(dt));
}
}  // namespace

Tensor randn(const Shape& shape, DType dt, double mean, double std) {
  check_float_dtype(dt, "randn");
  Tensor t = random_f32(shape, true, mean, std);
  return dt == DType::f32 ? t : t.to(dt);
}

Tensor rand(const Shape& shape, DType dt, double lo, double hi) {
  check_float_dtype(dt, "rand");
  Tensor t = random_f32(shape, false, lo, hi);
  return dt == DType::f32 ? t : t.to(dt);
}

}  // namespace hp
