// MegaGate (models/gate.h) against the chain of ops it replaced: the same experts, weights within
// float rounding, and gradients w.r.t. the logits equal to what autograd derives through the chain
// — for softmax top-k (Qwen3-MoE, Mixtral), DeepSeek-V3's sigmoid group-limited selection with a
// correction bias, scaling and eps-normalization, and sqrt-softplus scores; plus the counts, thread
// independence and the errors.
#include "hp/models/gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "hp/autograd/grad_mode.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/ops/ops.h"

namespace hp::models {
namespace {

void expect_near_all(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], tol * (1.0 + std::fabs(y[i]))) << what << " element " << i;
}

// Weights and d(Σ w·g)/d logits of `gate` on logits [n, e] drawn with `seed`.
std::pair<GateOutput, Tensor> run(const std::function<GateOutput(const Tensor&)>& gate, int64_t n,
                                  int64_t e, int64_t k, uint64_t seed) {
  manual_seed(seed);
  Tensor logits = mul(randn({n, e}), 2.0).requires_grad_();
  GateOutput out = gate(logits);
  manual_seed(seed + 1);
  sum(mul(out.weights, randn({n, k}))).backward();
  return {out, logits.grad()};
}

void expect_same_as_reference(const GateSpec& g, const Tensor& bias, int64_t e,
                              const std::function<GateOutput(const Tensor&)>& reference,
                              const std::string& what) {
  for (int64_t n : {1, 37}) {
    auto [fused, dfused] = run([&](const Tensor& l) { return fused_gate(l, bias, g); }, n, e,
                               g.top_k, 7 + uint64_t(n));
    auto [ref, dref] = run(reference, n, e, g.top_k, 7 + uint64_t(n));
    EXPECT_EQ(fused.indices.to_vector(), ref.indices.to_vector()) << what;
    EXPECT_EQ(fused.counts, ref.counts) << what;
    expect_near_all(fused.weights, ref.weights, 1e-6, what + " weights");
    expect_near_all(dfused, dref, 1e-5, what + " d logits");
    int64_t total = 0;
    for (int64_t c : fused.counts) total += c;
    EXPECT_EQ(total, n * g.top_k) << what;
  }
}

TEST(MegaGate, SoftmaxTopKEqualsTheChainOfOps) {
  for (bool norm : {false, true}) {
    GateSpec g;
    g.top_k = 3;
    g.norm_topk_prob = norm;
    expect_same_as_reference(
        g, Tensor(), 10, [&](const Tensor& l) { return composed_gate(l, Tensor(), g); },
        norm ? "softmax, normalized" : "softmax");
  }
}

TEST(MegaGate, DeepSeekSigmoidGroupLimitedEqualsTheChainOfOps) {
  GateSpec g;
  g.score = GateScore::sigmoid;
  g.top_k = 4;
  g.n_group = 4;
  g.topk_group = 2;
  g.norm_topk_prob = true;
  g.norm_eps = 1e-20;
  g.scaling = 2.5;
  manual_seed(3);
  const Tensor bias = mul(randn({16}), 0.5);
  expect_same_as_reference(
      g, bias, 16, [&](const Tensor& l) { return composed_gate(l, bias, g); },
      "sigmoid group-limited");
  // Only the kept groups' experts are chosen: with the bias pushing groups 0 and 3 far up, every
  // row picks from experts 0-3 and 12-15.
  Tensor skew = zeros({16});
  for (int64_t j : {0, 1, 2, 3, 12, 13, 14, 15}) skew.data<float>()[j] = 10.0f;
  auto [out, d] = run([&](const Tensor& l) { return fused_gate(l, skew, g); }, 9, 16, 4, 5);
  for (double id : out.indices.to_vector()) EXPECT_TRUE(id < 4 || id >= 12) << id;
}

// The group-limited selection written out plainly: groups ranked by the sum of their two largest
// scores (ties: lower group first), then the kept groups' experts by score (ties: lower index).
std::vector<int64_t> naive_group_selection(const std::vector<float>& c, const GateSpec& g) {
  const int64_t e = int64_t(c.size()), per = e / g.n_group;
  std::vector<std::pair<float, int64_t>> groups;
  for (int64_t q = 0; q < g.n_group; ++q) {
    std::vector<float> v(c.begin() + q * per, c.begin() + (q + 1) * per);
    std::sort(v.begin(), v.end(), std::greater<float>());
    groups.emplace_back(v[0] + v[1], q);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::pair<float, int64_t>> cand;
  for (int64_t r = 0; r < g.topk_group; ++r)
    for (int64_t j = groups[size_t(r)].second * per; j < (groups[size_t(r)].second + 1) * per; ++j)
      cand.emplace_back(c[size_t(j)], j);
  std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<int64_t> out;
  for (int64_t j = 0; j < g.top_k; ++j) out.push_back(cand[size_t(j)].second);
  return out;
}

TEST(MegaGate, GroupLimitedSelectionEqualsANaiveReference) {
  // (experts, n_group, topk_group, top_k): DeepSeek-V3's shape scaled down (the kept groups' top-2
  // bound the selection), fewer kept top-2s than k (no bound), one group kept.
  for (auto [e, ng, kg, k] :
       {std::array<int64_t, 4>{64, 8, 4, 8}, {48, 8, 3, 8}, {16, 4, 1, 2}, {32, 4, 2, 3}}) {
    GateSpec g;
    g.score = GateScore::sigmoid;
    g.top_k = k;
    g.n_group = ng;
    g.topk_group = kg;
    for (bool coarse : {false, true}) {
      manual_seed(uint64_t(e + kg + coarse));
      Tensor logits = mul(randn({50, e}), 2.0);
      // Coarse logits (multiples of 0.5) make ties between experts and between groups common.
      if (coarse) {
        std::vector<double> v = logits.to_vector();
        for (double& x : v) x = std::round(x * 2.0) / 2.0;
        logits = from_vector(v, {50, e});
      }
      const GateOutput out = fused_gate(logits, Tensor(), g);
      const auto p = sigmoid(logits).to_vector();  // the same kernel's scores
      const auto ids = out.indices.to_vector();
      for (int64_t t = 0; t < 50; ++t) {
        std::vector<float> row(static_cast<size_t>(e));
        for (int64_t j = 0; j < e; ++j) row[size_t(j)] = float(p[size_t(t * e + j)]);
        const auto want = naive_group_selection(row, g);
        for (int64_t j = 0; j < k; ++j)
          ASSERT_EQ(int64_t(ids[size_t(t * k + j)]), want[size_t(j)])
              << "e " << e << " n_group " << ng << " topk_group " << kg << " row " << t;
      }
    }
  }
}

TEST(MegaGate, SqrtSoftplusScoresHaveTheChainsGradient) {
  GateSpec g;
  g.score = GateScore::sqrt_softplus;
  g.top_k = 2;
  g.norm_topk_prob = true;
  // The chain: p = sqrt(log(1 + e^l)), the experts the fused gate chose, normalized.
  auto chain = [&](const Tensor& l) {
    GateOutput out;
    {
      autograd::NoGradGuard ng;
      out = fused_gate(l, Tensor(), g);
    }
    const Tensor p = sqrt(log(add(exp(l), 1.0)));
    Tensor w = gather(p, 1, out.indices);
    out.weights = w / sum(w, {-1}, true);
    return out;
  };
  expect_same_as_reference(g, Tensor(), 8, chain, "sqrt-softplus");
}

TEST(MegaGate, ThreadCountDoesNotChangeBits) {
  GateSpec g;
  g.score = GateScore::sigmoid;
  g.top_k = 2;
  g.norm_topk_prob = true;
  const int saved = num_threads();
  std::vector<std::vector<double>> w, d;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    auto [out, dl] =
        run([&](const Tensor& l) { return fused_gate(l, Tensor(), g); }, 301, 12, 2, 9);
    w.push_back(out.weights.to_vector());
    d.push_back(dl.to_vector());
  }
  set_num_threads(saved);
  EXPECT_EQ(w[0], w[1]);
  EXPECT_EQ(d[0], d[1]);
}

TEST(MegaGate, BadShapesAndSpecsNameTheValue) {
  GateSpec g;
  g.top_k = 9;
  try {
    fused_gate(zeros({4, 8}), Tensor(), g);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("top_k = 9 must be in [1, experts = 8]"),
              std::string::npos)
        << e.what();
  }
  g.top_k = 2;
  EXPECT_THROW(fused_gate(zeros({4, 8}), zeros({7}), g), ValueError);
  EXPECT_THROW(fused_gate(zeros({4, 8}, DType::bf16), Tensor(), g), ValueError);
  g.n_group = 3;  // 8 experts do not split into 3 groups
  EXPECT_THROW(fused_gate(zeros({4, 8}), Tensor(), g), ValueError);
  EXPECT_THROW(gate_score_from_name("relu"), ValueError);
}

}  // namespace
}  // namespace hp::models
