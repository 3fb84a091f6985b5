// The bf16 elementwise kernels (EwTable::bf16: widen, compute and round in registers) on every ISA
// this CPU runs, bitwise against the widen–compute–narrow path they replace: core's scalar
// bf16 → f32, the same ISA's f32 kernel, core's scalar round to nearest even. Over every bf16 bit
// pattern (±0, ±Inf, NaNs, subnormals, …) and sums that land exactly halfway between two bf16
// values; then through the eager driver in each form it sends to them (contiguous, row and scalar
// broadcast, in place, rows longer than a tile) against the same op on f32 tensors rounded after.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ew_test_params.h"
#include "hp/core/tensor.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/ew_table.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

class Bf16Kernels : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(Bf16Kernels);

uint16_t bf16_bits(float f) {
  return hp::f32_to_bf16(f);
}

// Equal bits, except that any NaN equals any NaN: when both operands of a commutative op are NaN,
// which one propagates is left open by IEEE 754 and follows the operand order the compiler chose
// for that instantiation (seen: x + y with two NaNs gives x's NaN in one, y's in the other).
bool same_bits(uint16_t a, uint16_t b) {
  const auto nan = [](uint16_t v) { return (v & 0x7FFF) > 0x7F80; };
  return a == b || (nan(a) && nan(b));
}

// x: every bf16 pattern, then x + y ties; y: the patterns shuffled, then the tie partners.
// 1 + k·2^-7 is a bf16 value and ±2^-8 half its ulp, so x ± 2^-8 is a tie whose lower neighbour is
// even for even k and odd for odd k (the sum rounds down, resp. up, to the even neighbour).
void inputs(std::vector<uint16_t>& x, std::vector<uint16_t>& y) {
  x.resize(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
  y = x;
  std::mt19937 rng(5);
  std::shuffle(y.begin(), y.end(), rng);
  x.push_back(0x3F80), y.push_back(0x3F80);  // 66305 in all: not a multiple of any vector width
  for (int k = 0; k < 128; ++k)
    for (float s : {1.0f, -1.0f, 256.0f}) {
      x.push_back(bf16_bits(s * (1.0f + static_cast<float>(k) / 128.0f)));
      y.push_back(bf16_bits(s / 256.0f));
      x.push_back(bf16_bits(s * (1.0f + static_cast<float>(k) / 128.0f)));
      y.push_back(bf16_bits(-s / 256.0f));
    }
}

// The path the kernels replace: widen (exact), the f32 kernel of the same ISA, round.
std::vector<uint16_t> widen_compute_narrow(const EwTable& tab, EwOp op, const uint16_t* x,
                                           const uint16_t* y, int64_t n, const float* p) {
  std::vector<float> xf(n), yf(n), of(n);
  for (int64_t i = 0; i < n; ++i) xf[i] = hp::bf16_to_f32(x[i]), yf[i] = hp::bf16_to_f32(y[i]);
  const float* in[2] = {xf.data(), yf.data()};
  tab.f32[static_cast<int>(op)](of.data(), in, n, p);
  std::vector<uint16_t> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = hp::f32_to_bf16(of[i]);
  return out;
}

TEST_P(Bf16Kernels, EveryOpEqualsWidenComputeNarrowBitwise) {
  const EwTable& tab = ew_table(isa());
  std::vector<uint16_t> x, y;
  inputs(x, y);
  const int64_t n = static_cast<int64_t>(x.size());  // not a multiple of 16: the tail path too
  ASSERT_NE(n % 16, 0);
  for (int k = 0; k < kNumEwOps; ++k) {
    const EwOp op = static_cast<EwOp>(k);
    for (const auto& pv : test::param_sets(op)) {
      float p[4] = {0, 0, 0, 0};
      std::copy(pv.begin(), pv.end(), p);
      // The whole set, and 13 elements from an odd offset (a short call: the tail alone).
      for (int64_t off : {int64_t(0), int64_t(40001)}) {
        const int64_t m = off == 0 ? n : 13;
        const std::vector<uint16_t> want = widen_compute_narrow(tab, op, &x[off], &y[off], m, p);
        std::vector<uint16_t> got(m);
        const uint16_t* in[2] = {&x[off], &y[off]};
        tab.bf16[k](got.data(), in, m, p);
        for (int64_t i = 0; i < m; ++i)
          ASSERT_TRUE(same_bits(got[i], want[i]))
              << isa_label() << " got 0x" << std::hex << got[i] << " want 0x" << want[i] << std::dec
              << " " << ew_name(op) << " p0=" << p[0] << " x=0x" << std::hex << x[off + i]
              << " y=0x" << y[off + i];
      }
    }
  }
}

// bf16 values: normals of a few magnitudes with specials mixed in.
Tensor bf16_tensor(const Shape& shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x8040};
  std::vector<bf16> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i].bits = i % 97 == 3 ? specials[(i / 97) % 8] : bf16_bits(d(rng));
  return from_data(v, shape);
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.contiguous().raw_data(), out.size() * 2);
  return out;
}

// Index of the first element where got and want differ (same_bits), or -1.
int64_t first_difference(const Tensor& got, const Tensor& want) {
  const std::vector<uint16_t> g = bits_of(got), w = bits_of(want);
  if (g.size() != w.size()) return 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!same_bits(g[i], w[i])) return static_cast<int64_t>(i);
  return -1;
}

TEST_P(Bf16Kernels, DriverFormsEqualF32OpRounded) {
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
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Tensor a = bf16_tensor(c.a, seed++), b = bf16_tensor(c.b, seed++);
    for (EwOp op : binary) {
      const Tensor want = elementwise(op, a.to(DType::f32), b.to(DType::f32), DType::f32);
      const Tensor got = elementwise(op, a, b, DType::bf16);
      EXPECT_EQ(first_difference(got, want.to(DType::bf16)), -1)
          << isa_label() << " " << c.name << " " << ew_name(op);
    }
  }
  const Tensor a = bf16_tensor({40, 1100}, 77), b = bf16_tensor({1100}, 78);
  for (EwOp op : unary) {
    const Tensor want = elementwise(op, a.to(DType::f32), {0.75f, -2.0f});
    EXPECT_EQ(first_difference(elementwise(op, a, {0.75f, -2.0f}), want.to(DType::bf16)), -1)
        << isa_label() << " " << ew_name(op);
  }
  // In place (the output aliases the first operand), with a broadcast second operand.
  Tensor inplace = a.contiguous().clone();
  elementwise_into(EwOp::mul, inplace, inplace, b);
  const Tensor want = elementwise(EwOp::mul, a.to(DType::f32), b.to(DType::f32), DType::f32);
  EXPECT_EQ(first_difference(inplace, want.to(DType::bf16)), -1) << isa_label();
}

}  // namespace
}  // namespace hp::kernels
