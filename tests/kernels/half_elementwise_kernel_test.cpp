// The bf16 and f16 elementwise kernels (EwTable::bf16 / f16: widen, compute and round in registers,
// through f32 tiles for the long ops, or a lookup table for the long unary ones; the whole set spans
// many tiles) on every ISA this CPU runs, bitwise against the widen–compute–narrow path they
// replace: core's scalar converter to f32, the same ISA's f32 kernel, core's scalar round to nearest
// even. Over every 16-bit pattern (±0, ±Inf, NaNs, subnormals, …) and sums that land exactly halfway
// between two values; then through the eager driver in each form it sends to them (contiguous, row
// and scalar broadcast, in place, rows longer than a tile) against the same op on f32 tensors
// rounded after.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ew_test_params.h"
#include "hp/core/tensor.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/ew_table.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

class HalfKernels : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(HalfKernels);

// A 16-bit float type: core's scalar converters and its significand bits.
struct Half {
  DType dt;
  float widen(uint16_t v) const { return dt == DType::bf16 ? hp::bf16_to_f32(v) : hp::f16_to_f32(v); }
  uint16_t narrow(float f) const { return dt == DType::bf16 ? hp::f32_to_bf16(f) : hp::f32_to_f16(f); }
  int mantissa_bits() const { return dt == DType::bf16 ? 7 : 10; }
  const EwHalfFn* table(const EwTable& tab) const { return dt == DType::bf16 ? tab.bf16 : tab.f16; }
  // Equal bits, except that any NaN equals any NaN: when both operands of a commutative op are
  // NaN, which one propagates is left open by IEEE 754 and follows the operand order the compiler
  // chose for that instantiation (seen: x + y with two NaNs gives x's NaN in one, y's in the other).
  bool same_bits(uint16_t a, uint16_t b) const {
    return a == b || (widen(a) != widen(a) && widen(b) != widen(b));
  }
};
const Half kHalves[] = {{DType::bf16}, {DType::f16}};

// x: every pattern, then x + y ties; y: the patterns shuffled, then the tie partners. With m
// mantissa bits, 1 + k·2^-m is representable and ±2^-(m+1) half its ulp, so x ± 2^-(m+1) is a tie
// whose lower neighbour is even for even k and odd for odd k.
void inputs(const Half& h, std::vector<uint16_t>& x, std::vector<uint16_t>& y) {
  x.resize(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
  y = x;
  std::mt19937 rng(5);
  std::shuffle(y.begin(), y.end(), rng);
  x.push_back(h.narrow(1.0f)), y.push_back(h.narrow(1.0f));  // 66305 in all: no vector multiple
  const float ulp = std::ldexp(1.0f, -h.mantissa_bits());
  for (int k = 0; k < 128; ++k)
    for (float s : {1.0f, -1.0f, 256.0f}) {
      for (float sign : {1.0f, -1.0f}) {
        x.push_back(h.narrow(s * (1.0f + static_cast<float>(k) * ulp)));
        y.push_back(h.narrow(sign * s * ulp / 2));
      }
    }
}

// The path the kernels replace: widen (exact), the f32 kernel of the same ISA, round.
std::vector<uint16_t> widen_compute_narrow(const Half& h, const EwTable& tab, EwOp op,
                                           const uint16_t* x, const uint16_t* y, int64_t n,
                                           const float* p) {
  std::vector<float> xf(n), yf(n), of(n);
  for (int64_t i = 0; i < n; ++i) xf[i] = h.widen(x[i]), yf[i] = h.widen(y[i]);
  const float* in[2] = {xf.data(), yf.data()};
  tab.f32[static_cast<int>(op)](of.data(), in, n, p);
  std::vector<uint16_t> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = h.narrow(of[i]);
  return out;
}

TEST_P(HalfKernels, EveryOpEqualsWidenComputeNarrowBitwise) {
  const EwTable& tab = kernel_table<EwTable>();
  for (const Half& h : kHalves) {
    std::vector<uint16_t> x, y;
    inputs(h, x, y);
    const int64_t n = static_cast<int64_t>(x.size());  // not a multiple of 32: the tail path too
    ASSERT_NE(n % 32, 0);
    for (int k = 0; k < kNumEwOps; ++k) {
      const EwOp op = static_cast<EwOp>(k);
      for (const auto& pv : test::param_sets(op)) {
        float p[4] = {0, 0, 0, 0};
        std::copy(pv.begin(), pv.end(), p);
        // The whole set, and 13 elements from an odd offset (a short call: the tail alone).
        for (int64_t off : {int64_t(0), int64_t(40001)}) {
          const int64_t m = off == 0 ? n : 13;
          const std::vector<uint16_t> want = widen_compute_narrow(h, tab, op, &x[off], &y[off], m, p);
          std::vector<uint16_t> got(m);
          const uint16_t* in[2] = {&x[off], &y[off]};
          h.table(tab)[k](got.data(), in, m, p);
          for (int64_t i = 0; i < m; ++i)
            ASSERT_TRUE(h.same_bits(got[i], want[i]))
                << isa_label() << " " << dtype_name(h.dt) << " " << ew_name(op) << " p0=" << p[0]
                << std::hex << " got 0x" << got[i] << " want 0x" << want[i] << " x=0x"
                << x[off + i] << " y=0x" << y[off + i];
        }
      }
    }
  }
}

// Normals of a few magnitudes with specials mixed in (±0, ±Inf, NaN, a subnormal of either type).
Tensor half_tensor(const Shape& shape, DType dt, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, inf, -inf, std::nanf(""), -std::nanf(""), 3e-39f, -1e-7f};
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i % 97 == 3 ? specials[(i / 97) % 8] : d(rng);
  return from_data(v, shape).to(dt);
}

// Index of the first element where got and want differ (Half::same_bits), or -1.
int64_t first_difference(const Half& h, const Tensor& got, const Tensor& want) {
  if (got.numel() != want.numel()) return 0;
  const Tensor g = got.contiguous(), w = want.contiguous();
  const auto* gb = static_cast<const uint16_t*>(g.raw_data());
  const auto* wb = static_cast<const uint16_t*>(w.raw_data());
  for (int64_t i = 0; i < g.numel(); ++i)
    if (!h.same_bits(gb[i], wb[i])) return i;
  return -1;
}

TEST_P(HalfKernels, DriverFormsEqualF32OpRounded) {
  struct Case {
    const char* name;
    Shape a, b;
  };
  // Rows of 1100 (> the driver's 1024-element tile) so broadcast tiles are reused.
  const Case cases[] = {{"contiguous", {40, 1100}, {40, 1100}},
                        {"row broadcast", {40, 1100}, {1100}},
                        {"column broadcast", {40, 1100}, {40, 1}},
                        {"scalar second", {40, 1100}, {}},
                        {"scalar first", {}, {40, 1100}}};
  const EwOp binary[] = {EwOp::add,     EwOp::sub,      EwOp::mul,     EwOp::div,
                         EwOp::maximum, EwOp::silu_bwd, EwOp::gelu_bwd};
  const EwOp unary[] = {EwOp::silu, EwOp::gelu, EwOp::exp, EwOp::neg, EwOp::affine};
  for (const Half& h : kHalves) {
    const DType dt = h.dt;
    uint32_t seed = 1;
    for (const Case& c : cases) {
      const Tensor a = half_tensor(c.a, dt, seed++), b = half_tensor(c.b, dt, seed++);
      for (EwOp op : binary) {
        const Tensor want = elementwise(op, a.to(DType::f32), b.to(DType::f32), DType::f32);
        EXPECT_EQ(first_difference(h, elementwise(op, a, b, dt), want.to(dt)), -1)
            << isa_label() << " " << dtype_name(dt) << " " << c.name << " " << ew_name(op);
      }
    }
    const Tensor a = half_tensor({40, 1100}, dt, 77), b = half_tensor({1100}, dt, 78);
    for (EwOp op : unary) {
      const Tensor want = elementwise(op, a.to(DType::f32), {0.75f, -2.0f});
      EXPECT_EQ(first_difference(h, elementwise(op, a, {0.75f, -2.0f}), want.to(dt)), -1)
          << isa_label() << " " << dtype_name(dt) << " " << ew_name(op);
    }
    // In place (the output aliases the first operand), with a broadcast second operand.
    Tensor inplace = a.clone();
    elementwise_into(EwOp::mul, inplace, inplace, b);
    const Tensor want = elementwise(EwOp::mul, a.to(DType::f32), b.to(DType::f32), DType::f32);
    EXPECT_EQ(first_difference(h, inplace, want.to(dt)), -1) << isa_label() << " " << dtype_name(dt);
  }
}

}  // namespace
}  // namespace hp::kernels
