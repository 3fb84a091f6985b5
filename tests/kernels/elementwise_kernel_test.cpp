// Every EwOp's f32 kernel on every ISA this CPU runs vs the f64 reference table (the same functor
// over ScalarArch<double>, i.e. libm), over random and special inputs (±0, ±Inf, NaN, subnormals,
// huge magnitudes). Tolerances are per op and say where the error comes from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ew_test_params.h"
#include "hp/kernels/cpu/ew_table.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Spacing of floats at |r| (the f32 ulp), 2^-149 for subnormals, 2^104 beyond FLT_MAX.
double ulp_of(double r) {
  r = std::fabs(r);
  if (r < FLT_MIN) return std::ldexp(1.0, -149);
  int e;
  std::frexp(std::min(r, static_cast<double>(FLT_MAX)), &e);  // r = m·2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 24);
}

// |got - ref| <= ulp·ulp(ref) + abs + rel_s·S(x, y), with S an op-specific magnitude (e.g. |x| for
// GELU, whose erf approximation has an absolute error).
struct Tol {
  double ulp = 0.5;  // 0.5 = correctly rounded
  double abs = 0;
  double rel_s = 0;
  int scale = 0;  // S: 0 none, 1 |x|, 2 |y|·max(1, |x|), 3 |y|·max(1, x²), 4 |y|·(1 + |x|³)
};

Tol tolerance(EwOp op, const float* p) {
  // Transcendental results that underflow: absolute slack of 2^-120 (below any float in use).
  const double tiny = std::ldexp(1.0, -120);
  switch (op) {
    case EwOp::neg:
    case EwOp::abs:
    case EwOp::sqrt:
    case EwOp::square:
    case EwOp::reciprocal:
    case EwOp::relu:
    case EwOp::clamp:
    case EwOp::add:
    case EwOp::sub:
    case EwOp::mul:
    case EwOp::div:
    case EwOp::maximum:
    case EwOp::minimum:
    case EwOp::relu_bwd:
    case EwOp::clamp_bwd:
    case EwOp::gt_mask:
    case EwOp::eq_mask:
      return {};  // one IEEE operation (or none): exact
    case EwOp::affine:
      return {1.0};  // f32 fma vs double fma then rounding (double rounding)
    case EwOp::rsqrt:
      return {1.5};  // sqrt then divide: two roundings
    case EwOp::exp:
    case EwOp::log:
      return {2.0, tiny};  // simd_math.h: ≤ 2 ulp
    case EwOp::tanh:
      return {4.0, tiny};  // simd_math.h: ≤ 4 ulp
    case EwOp::sigmoid:
    case EwOp::silu:
      return {4.0, tiny};  // exp's 2 ulp + add + divide
    case EwOp::sigmoid_bwd:
      return {2.0, tiny};  // three roundings
    // erf (A&S 7.1.26) has absolute error 1.5e-7, scaled by 0.5|x| in GELU.
    case EwOp::gelu:
      return {4.0, tiny, 1e-7, 1};
    // 1 + tanh(u) cancels for u << 0: tanh's 4 ulp of 1 become absolute error, times 0.5|x|.
    case EwOp::gelu_tanh:
      return {4.0, tiny, 2.5e-7, 1};
    case EwOp::gelu_bwd:
      return {4.0, tiny, 2e-7, 2};
    case EwOp::gelu_tanh_bwd:
      return {4.0, tiny, 6e-7, 4};
    // 1 - sigmoid(x) cancels for x >> 0: sigmoid's error times |x|.
    case EwOp::silu_bwd:
      return {6.0, tiny, 5e-7, 2};
    case EwOp::tanh_bwd:
      return {2.0, tiny, 1.2e-7, 3};  // 1 - x² cancels near |x| = 1
    case EwOp::pow_scalar:
    case EwOp::pow_scalar_bwd:
      // exp(e·log|x|) in f32: the rounding of y = e·log|x| (≈ |y|·2^-24 absolute) becomes relative
      // error of the result, ≈ 2|y| ulp; check() adds 2.5·|e|·|log x| ulp.
      return {4.0, tiny};
    default:
      break;
  }
  (void)p;
  return {};
}

// Wide input set: specials, thresholds of the vector math, subnormals, uniform and log-uniform.
std::vector<float> inputs(uint32_t seed) {
  std::vector<float> v = {
      0.0f,     -0.0f,  kInf,        -kInf,  kNaN,    -kNaN,  FLT_MAX, -FLT_MAX, FLT_MIN,
      -FLT_MIN, 1e-45f, -1e-45f,     1e-40f, -3e-39f, 1.0f,   -1.0f,   0.5f,     2.0f,
      0.4f,     -0.4f,  0.39999998f, 88.72f, 88.73f,  -87.3f, -103.9f, -104.5f,  -150.0f,
      200.0f,   1e10f,  -1e10f,      1e20f,  -1e20f,  1e30f,  -1e30f,  3.0f,     -3.0f,
      9.0f,     -9.0f,  20.0f,       -20.0f, 0.7f,    -0.5f,  1e-7f,   -1e-7f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-10.0f, 10.0f), expo(-38.0f, 38.0f);
  std::uniform_int_distribution<uint32_t> sub(1, 0x007FFFFF);
  for (int i = 0; i < 3000; ++i) v.push_back(uni(rng));
  for (int i = 0; i < 1500; ++i) v.push_back((i % 2 ? -1.0f : 1.0f) * std::pow(10.0f, expo(rng)));
  for (int i = 0; i < 200; ++i) {
    uint32_t bits = sub(rng) | (i % 2 ? 0x80000000u : 0u);
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

struct Stats {
  double max_ulp = 0;     // largest error in f32 ulps of the reference
  double max_budget = 0;  // largest error / allowed error
  size_t checked = 0;
};

// Runs table kernel `fn` and the f64 reference on (x, y) and checks every element.
void check(EwOp op, const EwTable& tab, const std::vector<float>& x, const std::vector<float>& y,
           const float* p, Stats& st, const char* isa) {
  const int arity = ew_arity(op);
  const size_t n = x.size();
  std::vector<float> out(n);
  const float* in[2] = {x.data(), y.data()};
  tab.f32[static_cast<int>(op)](out.data(), in, static_cast<int64_t>(n), p);
  std::vector<double> xd(x.begin(), x.end()), yd(y.begin(), y.end()), ref(n);
  const double* ind[2] = {xd.data(), yd.data()};
  ew_table_f64()[static_cast<int>(op)](ref.data(), ind, static_cast<int64_t>(n), p);
  const Tol tol = tolerance(op, p);
  for (size_t i = 0; i < n; ++i) {
    // sigmoid_bwd / tanh_bwd take the forward output y in [0, 1] / [-1, 1] as x.
    if ((op == EwOp::sigmoid_bwd && !(x[i] >= 0 && x[i] <= 1)) ||
        (op == EwOp::tanh_bwd && !(std::fabs(x[i]) <= 1)))
      continue;
    // pow_scalar_bwd forms e·x^(e-1) before multiplying by g: where that intermediate leaves
    // the f32 range the f32 result is Inf/NaN while double's stays finite; not a kernel error.
    if (op == EwOp::pow_scalar_bwd && std::isfinite(x[i]) && x[i] != 0) {
      const double mid = std::pow(std::fabs(static_cast<double>(x[i])), p[0] - 1.0);
      if (mid * std::max(1.0f, std::fabs(p[0])) > FLT_MAX || mid < FLT_MIN) continue;
    }
    const double got = out[i], want = ref[i];
    char where[256];
    std::snprintf(where, sizeof where, "%s %s x=%.9g y=%.9g p0=%g got=%.9g want=%.17g", isa,
                  ew_name(op), x[i], arity == 2 ? y[i] : 0.0f, p[0], got, want);
    // With a non-finite input, Inf·0 may be NaN in f32 where double kept a tiny factor nonzero
    // (e.g. silu_bwd(-103.9, Inf)): any non-finite result matches a non-finite reference.
    const bool finite_in = std::isfinite(x[i]) && (arity == 1 || std::isfinite(y[i]));
    if (!finite_in && !std::isfinite(want) && !std::isfinite(got)) continue;
    if (std::isnan(want) || std::isnan(got)) {
      ASSERT_TRUE(std::isnan(want) && std::isnan(got)) << where;
      continue;
    }
    if (std::isinf(want)) {
      ASSERT_EQ(got, want) << where;
      continue;
    }
    if (got == static_cast<float>(want)) {  // includes finite references that round to ±Inf
      ++st.checked;
      continue;
    }
    // An f32 Inf counts as ±2^128, the first value past FLT_MAX's binade.
    const double g = std::isinf(got) ? std::copysign(std::ldexp(1.0, 128), got) : got;
    const double ax = std::fabs(xd[i]), ay = std::fabs(yd[i]);
    double s = 0;
    switch (tol.scale) {
      case 1:
        s = ax;
        break;
      case 2:
        s = ay * std::max(1.0, ax);
        break;
      case 3:
        s = ay * std::max(1.0, ax * ax);
        break;
      case 4:
        s = ay * (1.0 + ax * ax * ax);
        break;
    }
    double ulp_tol = tol.ulp;
    if (op == EwOp::pow_scalar || op == EwOp::pow_scalar_bwd)
      ulp_tol += 2.5 * std::max(std::fabs(p[0]), std::fabs(p[0] - 1)) *
                 std::fabs(std::log(ax > 0 && std::isfinite(ax) ? ax : 1.0));
    const double err = std::fabs(g - want);
    const double allowed = ulp_tol * ulp_of(want) + tol.abs + tol.rel_s * s;
    st.max_ulp = std::max(st.max_ulp, err / ulp_of(want));
    st.max_budget = std::max(st.max_budget, err / allowed);
    ++st.checked;
    ASSERT_LE(err, allowed) << where << " ulp err " << err / ulp_of(want);
  }
}

class ElementwiseKernels : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(ElementwiseKernels);

TEST_P(ElementwiseKernels, EveryOpMatchesF64Reference) {
  const std::vector<float> xs = inputs(1);
  std::vector<float> ys = inputs(2);
  std::mt19937 rng(3);
  std::shuffle(ys.begin(), ys.end(), rng);
  // Binary ops also see every pair of the special values.
  std::vector<float> sx, sy;
  for (size_t i = 0; i < 44; ++i)
    for (size_t j = 0; j < 44; ++j) sx.push_back(xs[i]), sy.push_back(xs[j]);
  {
    const Isa isa = GetParam();
    const EwTable& tab = kernel_table<EwTable>();
    for (int k = 0; k < kNumEwOps; ++k) {
      const EwOp op = static_cast<EwOp>(k);
      Stats st;
      for (const auto& pv : test::param_sets(op)) {
        float p[4] = {0, 0, 0, 0};
        std::copy(pv.begin(), pv.end(), p);
        check(op, tab, xs, ys, p, st, isa_name(isa));
        if (ew_arity(op) == 2) check(op, tab, sx, sy, p, st, isa_name(isa));
        // Odd lengths and offsets: the tail path and chunk boundaries give the same elements.
        std::vector<float> x13(xs.begin() + 5, xs.begin() + 18),
            y13(ys.begin() + 5, ys.begin() + 18);
        check(op, tab, x13, y13, p, st, isa_name(isa));
      }
      if (::testing::Test::HasFatalFailure()) return;
      std::printf("  %-7s %-15s max %.2f ulp, %.2f of tolerance (%zu values)\n", isa_name(isa),
                  ew_name(op), st.max_ulp, st.max_budget, st.checked);
    }
  }
}

TEST_P(ElementwiseKernels, NanPropagatesThroughMaxMinReluClamp) {
  {
    const Isa isa = GetParam();
    const EwTable& tab = kernel_table<EwTable>();
    std::vector<float> a(9, kNaN), b(9, 1.0f), out(9);
    const float p[4] = {-1.0f, 1.0f, 0, 0};
    for (EwOp op : {EwOp::maximum, EwOp::minimum, EwOp::relu, EwOp::clamp}) {
      for (int order = 0; order < 2; ++order) {
        const float* in[2] = {order ? b.data() : a.data(), order ? a.data() : b.data()};
        if (order && ew_arity(op) == 1) continue;
        tab.f32[static_cast<int>(op)](out.data(), in, 9, p);
        for (float v : out) EXPECT_TRUE(std::isnan(v)) << isa_name(isa) << " " << ew_name(op);
      }
    }
  }
}

// exp (and the ops built on it) takes a shorter path when every lane of a vector is in (-86, 88)
// (simd_math.h): the same bits as the general path by construction. Each value is run once in a
// vector of in-range values (fast path) and once beside a lane of -100 (general path, the whole
// vector): the results must be equal bitwise, across the range's edges and in between.
TEST_P(ElementwiseKernels, ExpFastPathEqualsGeneralPathBitwise) {
  const Isa isa = GetParam();
  const EwTable& tab = kernel_table<EwTable>();
  std::vector<float> vals;
  for (float v : {-86.0f, -85.99999f, -85.5f, -80.0f, -60.0f, -1e-30f, 0.0f, -0.0f, 1e-30f, 0.3466f,
                  -0.3466f, 1.0f, 20.0f, 87.99999f, 88.0f})
    vals.push_back(v);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-86.0f, 88.0f);
  for (int i = 0; i < 4000; ++i) vals.push_back(u(rng));
  const int W = 16;  // a multiple of every ISA's vector width
  for (EwOp op : {EwOp::exp, EwOp::sigmoid, EwOp::silu, EwOp::tanh, EwOp::gelu}) {
    const float p[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < vals.size(); ++i) {
      // in range: the value beside copies of 1; general: beside -100 (exp(-100) leaves the range)
      float a[W], b[W], oa[W], ob[W];
      for (int k = 0; k < W; ++k) a[k] = 1.0f, b[k] = -100.0f;
      // a negated value too: sigmoid / silu / tanh / gelu evaluate exp at -x, -2|x|, -x²
      const float x = (i % 2) ? vals[i] : -vals[i] * 0.5f;
      a[3] = b[3] = x;
      const float* ia[2] = {a, a};
      const float* ib[2] = {b, b};
      tab.f32[static_cast<int>(op)](oa, ia, W, p);
      tab.f32[static_cast<int>(op)](ob, ib, W, p);
      uint32_t ba, bb;
      std::memcpy(&ba, &oa[3], 4);
      std::memcpy(&bb, &ob[3], 4);
      ASSERT_EQ(ba, bb) << isa_name(isa) << " " << ew_name(op) << "(" << x << ")";
    }
  }
}

// GELU's negative tail x·Φ(x) (simd_math.h vec_norm_cdf): Φ there is erfc's own approximation,
// not 1 + erf, so it stays within a few percent where the erf form rounded to 0 (x < -5.7); far
// out it underflows to at most 1e-37 in magnitude, never NaN (only -Inf gives NaN, as x·0).
TEST_P(ElementwiseKernels, GeluKeepsItsNegativeTail) {
  const Isa isa = GetParam();
  const EwTable& tab = kernel_table<EwTable>();
  std::vector<float> x = {-5.0f, -6.0f, -8.0f, -10.0f, -12.0f, -13.0f, -14.0f, -20.0f,
                          -1e4f, -1e30f, -FLT_MAX};
  std::vector<float> y(x.size());
  const float* in[1] = {x.data()};
  tab.f32[static_cast<int>(EwOp::gelu)](y.data(), in, static_cast<int64_t>(x.size()), nullptr);
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = 0.5 * x[i] * std::erfc(-static_cast<double>(x[i]) / std::sqrt(2.0));
    if (x[i] >= -13.0f)
      EXPECT_LT(std::fabs(y[i] - ref), 0.05 * std::fabs(ref)) << isa_name(isa) << " gelu(" << x[i] << ")";
    else
      EXPECT_LT(std::fabs(y[i]), 1e-37) << isa_name(isa) << " gelu(" << x[i] << ") = " << y[i];
  }
}

}  // namespace
}  // namespace hp::kernels
