// Newton–Schulz orthogonality, thread-count independence of both optimizers, and clipping.
#include "hp/optim/kernels.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/ops/ops.h"
#include "hp/optim/grad.h"
#include "hp/optim/optimizer.h"
#include "isa_test.h"

namespace hp::optim {
namespace {

std::vector<float> gaussian(int64_t n, uint64_t seed) {
  // A small LCG + Box-Muller keeps the test independent of the library RNG.
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  auto uni = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (auto& x : v)
    x = static_cast<float>(std::sqrt(-2 * std::log(uni())) * std::cos(6.283185307 * uni()));
  return v;
}

// Largest |eigenvalue| of the symmetric [n, n] matrix m, by power iteration.
double spectral_radius(const std::vector<double>& m, int64_t n) {
  std::vector<double> x(static_cast<size_t>(n), 1.0), y(static_cast<size_t>(n));
  double lambda = 0;
  for (int it = 0; it < 500; ++it) {
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j)
        acc += m[static_cast<size_t>(i * n + j)] * x[static_cast<size_t>(j)];
      y[static_cast<size_t>(i)] = acc;
      norm += acc * acc;
    }
    lambda = std::sqrt(norm);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = y[static_cast<size_t>(i)] / lambda;
  }
  return lambda;
}

// ‖O·Oᵀ − I‖₂ for O [rows, cols] with rows <= cols (or Oᵀ·O − I when tall).
double orthogonality_error(const std::vector<float>& o, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t k = tall ? cols : rows;
  std::vector<double> gram(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < (tall ? rows : cols); ++t)
        acc += tall ? double(o[t * cols + i]) * o[t * cols + j]
                    : double(o[i * cols + t]) * o[j * cols + t];
      gram[static_cast<size_t>(i * k + j)] = acc - (i == j ? 1.0 : 0.0);
    }
  return spectral_radius(gram, k);
}

TEST(NewtonSchulz, NearlyOrthogonalForWideAndTall) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{32, 64}, {64, 32}, {48, 48}}) {
    auto g = gaussian(rows * cols, 7);
    std::vector<float> o(g.size());
    newton_schulz(g.data(), o.data(), rows, cols, 5);
    // The quintic trades exactness for speed: singular values land in about [0.7, 1.2], so
    // O·Oᵀ − I has eigenvalues within about ±0.5 (exact orthogonalization would give 0).
    double err = orthogonality_error(o, rows, cols);
    EXPECT_LT(err, 0.55) << rows << "x" << cols;
    // Starting from the normalized input (error ~1), the iteration must have moved far.
    EXPECT_GT(err, 0.0);
  }
}

TEST(NewtonSchulz, TallIsTheTransposeOfWide) {
  const int64_t r = 5, c = 9;
  auto g = gaussian(r * c, 3);
  std::vector<float> gt(g.size()), o(g.size()), ot(g.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      gt[static_cast<size_t>(j * r + i)] = g[static_cast<size_t>(i * c + j)];
  newton_schulz(g.data(), o.data(), r, c, 5);
  newton_schulz(gt.data(), ot.data(), c, r, 5);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      EXPECT_EQ(o[static_cast<size_t>(i * c + j)], ot[static_cast<size_t>(j * r + i)]);
}

// Runs three steps of an AdamW+Muon optimizer with clipping on sizes that span several chunks
// and GEMM tiles; returns every parameter's values.
std::vector<std::vector<double>> run_steps(int threads) {
  set_num_threads(threads);
  std::vector<NamedTensor> params = {
      {"embed.weight", from_data(gaussian(300 * 130, 1), {300, 130})},
      {"layers.0.w", from_data(gaussian(200 * 96, 2), {200, 96})},
      {"layers.0.b", from_data(gaussian(70000, 3), {70000})}};
  OptimizerOptions o;
  o.groups.push_back({"embed", {"embed*"}, Algorithm::adamw, 1.0, std::nullopt});
  o.default_algorithm = Algorithm::auto_select;
  Optimizer opt(params, o);
  std::vector<double> norms;
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].second.set_grad(
          from_data(gaussian(params[i].second.numel(), 10 * s + i + 5), params[i].second.shape()));
    norms.push_back(clip_grad_norm(opt.parameters(), 100.0));
    opt.step(1e-2);
  }
  std::vector<std::vector<double>> out;
  for (auto& [n, p] : params) out.push_back(p.to_vector());
  out.push_back(norms);
  return out;
}

TEST(Optimizer, BitwiseIdenticalWithOneAndTwoThreads) {
  const int saved = num_threads();
  auto one = run_steps(1);
  auto two = run_steps(2);
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(one[i] == two[i]) << "tensor " << i;
}

// The AdamW formula of adamw.h written out per element: the reference every ISA's kernel must
// equal bitwise (no FMA: each product and sum rounded on its own).
void adamw_reference(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * s.grad_scale;
    const float mi = m[i] + (1.0f - s.beta1) * (gi - m[i]);
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * (1.0f / s.bias_correction2_sqrt) + s.eps;
    p[i] = p[i] * (1.0f - s.lr * s.weight_decay) - s.step_size * (mi / denom);
  }
}

class AdamWKernel : public test::IsaTest {};

TEST_P(AdamWKernel, BitwiseTheReferenceOnEveryLengthAndSplit) {
  // Lengths around the vector widths (tails of every size) and a long one; state from earlier
  // steps (m, v nonzero), clipped (scale < 1) and unclipped gradients, weight decay on and off.
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 4099}) {
    for (double scale : {1.0, 0.3173}) {
      for (double wd : {0.0, 0.1}) {
        const AdamWStep s = adamw_scalars(1e-3, 0.9, 0.95, 1e-8, wd, 3, scale);
        const std::vector<float> g = gaussian(n, 11), p0 = gaussian(n, 12), m0 = gaussian(n, 13);
        std::vector<float> v0 = gaussian(n, 14);
        for (float& x : v0) x = x * x;  // a second moment is >= 0
        std::vector<float> p = p0, m = m0, v = v0, rp = p0, rm = m0, rv = v0;
        adamw_reference(rp.data(), g.data(), rm.data(), rv.data(), n, s);
        // Split the range at an odd point, as the optimizer's chunks may: no effect on results.
        const int64_t half = n / 2 | 1;
        const int64_t cut = std::min(n, half);
        adamw_update(p.data(), g.data(), m.data(), v.data(), cut, s);
        adamw_update(p.data() + cut, g.data() + cut, m.data() + cut, v.data() + cut, n - cut, s);
        EXPECT_TRUE(p == rp && m == rm && v == rv)
            << isa_label() << " n " << n << " scale " << scale << " wd " << wd;
        EXPECT_NE(p, p0);  // the update moved every parameter
      }
    }
  }
}

HP_INSTANTIATE_ISA_TESTS(AdamWKernel);

TEST(SumOfSquares, BlockOrderOfTheSequentialSumAnyThreadCount) {
  // Buffers with 0, 1, 8, 9 and 17 blocks (short last blocks): the value is the blocks' sequential
  // sums added in buffer and block order, whatever the thread count.
  const std::vector<int64_t> sizes = {0, 5, kSumSquaresBlock * 8, kSumSquaresBlock * 8 + 3,
                                      kSumSquaresBlock * 16 + 100};
  std::vector<std::vector<float>> data;
  std::vector<std::span<const float>> spans;
  double expect = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    data.push_back(gaussian(sizes[k], 20 + k));
    for (int64_t b = 0; b < sizes[k]; b += kSumSquaresBlock) {
      double acc = 0;
      for (int64_t i = b; i < std::min(sizes[k], b + kSumSquaresBlock); ++i)
        acc += double(data[k][static_cast<size_t>(i)]) * data[k][static_cast<size_t>(i)];
      expect += acc;
    }
  }
  for (const auto& d : data) spans.emplace_back(d.data(), d.size());
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    EXPECT_EQ(sum_of_squares(spans), expect) << threads << " threads";
  }
  set_num_threads(saved);
  EXPECT_GT(expect, 0.0);
}

TEST(ClipGradNorm, FactorIsTheInPlaceClipsScale) {
  // Optimizer::step(lr, clip_factor(norm, max)) equals clip_grad_norm then step(lr), bitwise.
  auto make = [] {
    return std::vector<NamedTensor>{{"w", from_data(gaussian(3000, 31), {30, 100})},
                                    {"b", from_data(gaussian(100, 32), {100})}};
  };
  for (Algorithm algo : {Algorithm::adamw, Algorithm::muon}) {
    OptimizerOptions o;
    o.default_algorithm = algo;
    o.groups.push_back({"b", {"b"}, Algorithm::adamw, 1.0, std::nullopt});
    auto a = make(), b = make();
    Optimizer oa(a, o), ob(b, o);
    for (int s = 0; s < 2; ++s) {
      for (size_t i = 0; i < a.size(); ++i) {
        const auto g = gaussian(a[i].second.numel(), 40 + 10 * s + i);
        a[i].second.set_grad(from_data(g, a[i].second.shape()));
        b[i].second.set_grad(from_data(g, b[i].second.shape()));
      }
      const double norm = clip_grad_norm(oa.parameters(), 0.5);
      EXPECT_GT(norm, 5.0);  // clipped by a factor below 0.1
      oa.step(1e-2);
      ob.step(1e-2, clip_factor(norm, 0.5));
    }
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
  }
  EXPECT_EQ(clip_factor(0.4, 0.5), 1.0);
  EXPECT_EQ(clip_factor(std::nan(""), 0.5), 1.0);
  EXPECT_EQ(clip_factor(3.0, 0.0), 1.0);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheLimitAndSkipsMissingGrads) {
  Tensor a = zeros({2}), b = zeros({2}), c = zeros({3});
  a.set_grad(from_vector({3, 0}, {2}));
  b.set_grad(from_vector({0, 4}, {2}));
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 10.0), 5.0);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{3, 0}));
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 1.0), 5.0);
  EXPECT_NEAR(a.grad().to_vector()[0], 3.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(b.grad().to_vector()[1], 4.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_FALSE(c.grad().defined());
}

}  // namespace
}  // namespace hp::optim
