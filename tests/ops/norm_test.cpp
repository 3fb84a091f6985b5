// rms_norm / layer_norm: gradients vs f64 finite differences, values vs a double reference on every
// ISA, thread-count determinism of y, dx, dw, db, and the bf16 path.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/isa.h"
#include "isa_test.h"

namespace hp {
namespace {

using kernels::Isa;
using testing::expect_gradcheck;
using testing::leaf;

// Per-row double reference of both norms; x [rows, n] as doubles.
std::vector<double> ref_norm(bool rms, const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& b, int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    const double* xr = x.data() + r * n;
    double mu = 0, ss = 0;
    if (!rms) {
      for (int64_t i = 0; i < n; ++i) mu += xr[i];
      mu /= n;
    }
    for (int64_t i = 0; i < n; ++i) ss += (xr[i] - mu) * (xr[i] - mu);
    const double rs = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] - mu) * rs * w[i] + (rms ? 0.0 : b[i]);
  }
  return y;
}

TEST(Norms, RmsNormGradcheck) {
  for (bool transposed : {false, true}) {
    Tensor x = leaf({4, 7}, 1, transposed), w = leaf({7}, 2);
    expect_gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-6); },
                     {x, w});
  }
  Tensor x3 = leaf({2, 3, 5}, 3);
  expect_gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], Tensor(), 1e-3); },
                   {x3});
}

TEST(Norms, LayerNormGradcheck) {
  for (bool transposed : {false, true}) {
    Tensor x = leaf({4, 7}, 4, transposed), w = leaf({7}, 5), b = leaf({7}, 6);
    expect_gradcheck(
        [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); },
        {x, w, b});
  }
  Tensor x3 = leaf({2, 3, 5}, 7);
  expect_gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), Tensor(), 1e-5); },
      {x3});
}

// f32 values on every ISA vs the double reference; gradients vs the f64 path. n = 1027 exercises
// the partial last vector of each row.
class NormsIsa : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(NormsIsa);

TEST_P(NormsIsa, ValuesMatchDoubleReference) {
  const int64_t rows = 37, n = 1027;
  manual_seed(11);
  Tensor x = randn({rows, n}, DType::f32, 0.3, 2.0), w = randn({n}), b = randn({n});
  Tensor g = randn({rows, n});
  {
    const Isa isa = GetParam();
    for (bool rms : {true, false}) {
      SCOPED_TRACE(std::string(kernels::isa_name(isa)) + (rms ? " rms" : " layer"));
      Tensor xl = x.clone(), wl = w.clone(), bl = b.clone();
      for (auto& t : {xl, wl, bl}) t.requires_grad_();
      Tensor y = rms ? rms_norm(xl, wl, 1e-6) : layer_norm(xl, wl, bl, 1e-5);
      auto ref = ref_norm(rms, x.to_vector(), w.to_vector(), b.to_vector(), n, rms ? 1e-6 : 1e-5);
      auto yv = y.to_vector();
      for (size_t i = 0; i < yv.size(); ++i)
        ASSERT_NEAR(yv[i], ref[i], 2e-6 * (1 + std::fabs(ref[i])));
      sum(mul(y, g)).backward();
      // The same in f64.
      Tensor xd = x.to(DType::f64), wd = w.to(DType::f64), bd = b.to(DType::f64);
      for (auto& t : {xd, wd, bd}) t.requires_grad_();
      Tensor yd = rms ? rms_norm(xd, wd, 1e-6) : layer_norm(xd, wd, bd, 1e-5);
      sum(mul(yd, g.to(DType::f64))).backward();
      auto cmp = [](const Tensor& got, const Tensor& want, double tol) {
        auto a = got.to_vector(), e = want.to_vector();
        double scale = 0;
        for (double v : e) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], tol * scale) << i;
      };
      cmp(xl.grad(), xd.grad(), 1e-5);
      cmp(wl.grad(), wd.grad(), 1e-5);
      if (!rms) cmp(bl.grad(), bd.grad(), 1e-5);
    }
  }
}

TEST(Norms, ThreadCountDoesNotChangeBits) {
  const int saved = num_threads();
  manual_seed(21);
  Tensor x = randn({1000, 300}), w = randn({300}), b = randn({300}), g = randn({1000, 300});
  auto run = [&](bool rms, int threads) {
    set_num_threads(threads);
    Tensor xl = x.clone(), wl = w.clone(), bl = b.clone();
    for (auto& t : {xl, wl, bl}) t.requires_grad_();
    Tensor y = rms ? rms_norm(xl, wl) : layer_norm(xl, wl, bl);
    sum(mul(y, g)).backward();
    std::vector<std::vector<float>> out = {y.to_vector_as<float>(), xl.grad().to_vector_as<float>(),
                                           wl.grad().to_vector_as<float>()};
    if (!rms) out.push_back(bl.grad().to_vector_as<float>());
    return out;
  };
  for (bool rms : {true, false}) {
    auto one = run(rms, 1), two = run(rms, 2);
    ASSERT_EQ(one.size(), two.size());
    for (size_t k = 0; k < one.size(); ++k)
      EXPECT_EQ(0, std::memcmp(one[k].data(), two[k].data(), one[k].size() * 4)) << "output " << k;
  }
  set_num_threads(saved);
}

TEST(Norms, Bf16RoundsTheF32ResultOnce) {
  manual_seed(31);
  const int64_t n = 250;
  Tensor x = randn({6, n}).to(DType::bf16), w = randn({n}).to(DType::bf16);
  for (bool rms : {true, false}) {
    Tensor y = rms ? rms_norm(x, w) : layer_norm(x, w, Tensor());
    ASSERT_EQ(y.dtype(), DType::bf16);
    auto ref = ref_norm(rms, x.to_vector(), w.to_vector(), std::vector<double>(n, 0.0), n,
                        rms ? 1e-6 : 1e-5);
    auto yv = y.to_vector();
    // One rounding to bf16 (8 significant bits): half an ulp is at most 2^-8 relative.
    for (size_t i = 0; i < yv.size(); ++i)
      ASSERT_NEAR(yv[i], ref[i], std::fabs(ref[i]) / 256 + 1e-6) << i;
  }
  Tensor xl = x.clone(), wl = w.clone();
  xl.requires_grad_(), wl.requires_grad_();
  sum(rms_norm(xl, wl)).backward();
  EXPECT_EQ(xl.grad().dtype(), DType::bf16);
  EXPECT_EQ(wl.grad().dtype(), DType::bf16);
  EXPECT_EQ(wl.grad().shape(), (Shape{n}));
}

TEST(Norms, BadWeightShapeNamesShapes) {
  try {
    rms_norm(zeros({2, 8}), zeros({7}));
    FAIL() << "no throw";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[rms_norm]"), std::string::npos) << m;
    EXPECT_NE(m.find("[7]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hp
