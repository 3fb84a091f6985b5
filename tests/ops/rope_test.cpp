// rotary_embedding: gradients in both conventions and layouts, equality with a direct
// implementation of HF's rotate_half formula (and GPT-J's rotate_every_two), rope_cos_sin values.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "isa_test.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

TEST(Rope, GradcheckBothConventionsBothLayouts) {
  const int64_t T = 4, D = 6;
  auto [c, s] = rope_cos_sin(T, D, 100.0, DType::f64);
  for (bool interleaved : {false, true}) {
    for (int64_t seq_dim : {1, 2}) {
      SCOPED_TRACE(std::to_string(interleaved) + " seq_dim " + std::to_string(seq_dim));
      Shape shape = seq_dim == 2 ? Shape{2, 3, T, D} : Shape{2, T, 3, D};
      Tensor x = leaf(shape, 3);
      expect_gradcheck(
          [&, c = c, s = s](const std::vector<Tensor>& in) {
            return rotary_embedding(in[0], c, s, interleaved, seq_dim);
          },
          {x});
    }
  }
}

// HF: q·cos_full + rotate_half(q)·sin_full, cos_full = cat(cos, cos), rotate_half(q) =
// cat(-q[D/2:], q[:D/2]). GPT-J: cos/sin repeated per pair, rotate_every_two(q)[2i] = -q[2i+1],
// [2i+1] = q[2i]. x is [B, H, T, D] here; seq_dim=1 is checked by permuting.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& c,
                              const std::vector<double>& s, int64_t rows, int64_t T, int64_t D,
                              bool interleaved) {
  std::vector<double> y(q.size());
  const int64_t h = D / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T;
    const double* x = q.data() + r * D;
    for (int64_t j = 0; j < D; ++j) {
      double cf, sf, rot;
      if (!interleaved) {
        cf = c[t * h + j % h], sf = s[t * h + j % h];
        rot = j < h ? -x[j + h] : x[j - h];
      } else {
        cf = c[t * h + j / 2], sf = s[t * h + j / 2];
        rot = j % 2 == 0 ? -x[j + 1] : x[j - 1];
      }
      y[r * D + j] = x[j] * cf + rot * sf;
    }
  }
  return y;
}

TEST(Rope, MatchesHfRotateHalfAndGptj) {
  const int64_t B = 2, H = 3, T = 17, D = 64;
  auto [c, s] = rope_cos_sin(T, D, 10000.0, DType::f32);
  manual_seed(5);
  Tensor x = randn({B, H, T, D});
  for (bool interleaved : {false, true}) {
    auto ref = reference(x.to_vector(), c.to_vector(), s.to_vector(), B * H * T, T, D, interleaved);
    auto y = rotary_embedding(x, c, s, interleaved, 2).to_vector();
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-6 * (1 + std::fabs(ref[i])));
    // [B, T, H, D] layout: same values after moving H and T.
    Tensor xt = contiguous(transpose(x, 1, 2));
    Tensor yt = rotary_embedding(xt, c, s, interleaved, 1);
    auto back = contiguous(transpose(yt, 1, 2)).to_vector();
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(back[i], y[i]);
    // bf16 x: f32 math, one rounding.
    Tensor xb = x.to(DType::bf16);
    auto refb =
        reference(xb.to_vector(), c.to_vector(), s.to_vector(), B * H * T, T, D, interleaved);
    auto yb = rotary_embedding(xb, c, s, interleaved, 2).to_vector();
    for (size_t i = 0; i < yb.size(); ++i)
      ASSERT_NEAR(yb[i], refb[i], std::fabs(refb[i]) / 256 + 1e-6) << i;
  }
}

// Per-row tables [B, T, D/2] (positions restarting at packed documents): row b rotates as with
// its own [T, D/2] table, in both layouts; the gradient checks out; a table for another batch
// size, or per-row tables over seq_dim 0, are errors naming the shapes.
TEST(Rope, PerRowTablesRotateEachRowByItsOwn) {
  const int64_t B = 2, H = 3, T = 5, D = 8;
  auto [c0, s0] = rope_cos_sin(T, D, 100.0, DType::f64);
  auto [c9, s9] = rope_cos_sin_from_inv_freq({1.0, 0.1, 0.01, 0.001}, 9, T, 1.0, DType::f64);
  const Tensor c = stack({c0, c9}, 0), s = stack({s0, s9}, 0);  // [2, T, D/2]
  for (int64_t seq_dim : {1, 2}) {
    SCOPED_TRACE("seq_dim " + std::to_string(seq_dim));
    const Shape shape = seq_dim == 2 ? Shape{B, H, T, D} : Shape{B, T, H, D};
    Tensor x = leaf(shape, 5);
    const Tensor y = rotary_embedding(x, c, s, false, seq_dim);
    for (int64_t b = 0; b < B; ++b) {
      const Tensor xb = contiguous(narrow(x, 0, b, 1));
      const Tensor yb = rotary_embedding(xb, b == 0 ? c0 : c9, b == 0 ? s0 : s9, false, seq_dim);
      EXPECT_EQ(contiguous(narrow(y, 0, b, 1)).to_vector(), yb.to_vector()) << "row " << b;
    }
    expect_gradcheck(
        [&](const std::vector<Tensor>& in) { return rotary_embedding(in[0], c, s, true, seq_dim); },
        {x});
  }
  Tensor x = leaf({3, T, H, D}, 6);
  EXPECT_THROW(rotary_embedding(x, c, s, false, 1), ValueError);  // tables for 2 rows, x has 3
  EXPECT_THROW(rotary_embedding(leaf({T, B, H, D}, 7), c, s, false, 0), ValueError);
}

TEST(Rope, CosSinTable) {
  auto [c, s] = rope_cos_sin(8, 16, 10000.0, DType::f64);
  ASSERT_EQ(c.shape(), (Shape{8, 8}));
  EXPECT_DOUBLE_EQ(c.at({5, 0}), std::cos(5.0));
  EXPECT_DOUBLE_EQ(s.at({7, 3}), std::sin(7.0 * std::pow(10000.0, -6.0 / 16)));
  EXPECT_THROW(rope_cos_sin(8, 15, 10000.0, DType::f32), ValueError);
  EXPECT_THROW(rotary_embedding(zeros({1, 2, 7, 16}), c, s), ValueError);  // T = 7 vs 8
}

}  // namespace
}  // namespace hp

namespace hp {
namespace {

class RopeIsa : public test::IsaTest {};

// Every ISA's f32 rows, forward and inverse (backward), against the formula in f32 written out
// per element (separate roundings, as the kernels compute it): bitwise, for halves with vector
// tails (3, 10, 37) and whole vectors (8, 32), both pair layouts.
TEST_P(RopeIsa, F32RowsBitwiseTheFormula) {
  for (int64_t d : {6, 16, 20, 64, 74}) {
    for (bool interleaved : {false, true}) {
      const int64_t B = 2, T = 5, H = 3, half = d / 2;
      manual_seed(d);
      const Tensor x = randn({B, T, H, d});
      auto [c, s] = rope_cos_sin(T, d, 1000.0, DType::f32);
      const Tensor xr = rotary_embedding(x, c, s, interleaved, 1);
      const Tensor back = rotary_embedding(xr, c, neg(s), interleaved, 1);  // the inverse
      const std::vector<float> xv = x.to_vector_as<float>(), cv = c.to_vector_as<float>(),
                               sv = s.to_vector_as<float>();
      std::vector<float> want(xv.size()), want_back(xv.size());
      auto rotate = [&](const std::vector<float>& in, std::vector<float>& out, float sign) {
        for (int64_t r = 0; r < B * T * H; ++r) {
          const int64_t t = r / H % T;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t ia = r * d + (interleaved ? 2 * i : i);
            const int64_t ib = r * d + (interleaved ? 2 * i + 1 : i + half);
            const float cc = cv[t * half + i], ss = sign * sv[t * half + i];
            const float p = in[ia] * cc, q = in[ib] * ss, u = in[ib] * cc, w = in[ia] * ss;
            out[ia] = p - q;
            out[ib] = u + w;
          }
        }
      };
      rotate(xv, want, 1.0f);
      rotate(want, want_back, -1.0f);
      EXPECT_EQ(xr.to_vector_as<float>(), want) << isa_label() << " d " << d << " " << interleaved;
      EXPECT_EQ(back.to_vector_as<float>(), want_back) << isa_label() << " d " << d;
      EXPECT_NE(want, xv);  // the rotation moved the values
    }
  }
}

HP_INSTANTIATE_ISA_TESTS(RopeIsa);

}  // namespace
}  // namespace hp
