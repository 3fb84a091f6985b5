// MegaGate (moe/gate.h) against the chain of ops it replaced: the same experts, weights within
// float rounding, and gradients w.r.t. the logits equal to what autograd derives through the chain
// — for softmax top-k (Qwen3-MoE, Mixtral), DeepSeek-V3's sigmoid group-limited selection with a
// correction bias, scaling and eps-normalization, and sqrt-softplus scores; plus the counts, thread
// independence and the errors.
#include "hp/moe/gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "hp/autograd/grad_mode.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/gate_topk.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/ops/ops.h"
#include "isa_test.h"

namespace hp::moe {
namespace {

using kernels::GateSigmoidTopKFn;
using kernels::GateTopKFn;
using kernels::GateTopKScratch;
using kernels::GateTopKShape;
using kernels::GateTopKTable;

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

// The selection (gate_topk.h) of one row c, on `isa`.
std::vector<int64_t> select_on(kernels::Isa isa, const std::vector<float>& c, const GateSpec& g) {
  const GateTopKFn topk = kernels::kernel_table<GateTopKTable>({isa}).topk;
  const int64_t e = int64_t(c.size());
  std::vector<int64_t> idx(size_t(g.top_k)), gidx(size_t(g.n_group));
  std::vector<float> val(size_t(g.top_k)), gval(size_t(g.n_group)), top2(size_t(2 * g.n_group)),
      kept2(size_t(2 * g.n_group));
  std::vector<char> keep(size_t(g.n_group));
  topk(c.data(), GateTopKShape{e, g.top_k, g.n_group, g.topk_group},
       GateTopKScratch{idx.data(), val.data(), gidx.data(), gval.data(), top2.data(), kept2.data(),
                       keep.data()});
  return idx;
}

// Rows of e values: random, coarse (multiples of 0.5: ties between experts and groups are common)
// or all equal (every comparison a tie).
std::vector<std::vector<float>> tie_rows(int64_t e, uint64_t seed) {
  std::vector<std::vector<float>> rows;
  manual_seed(seed);
  const std::vector<double> v = randn({40, e}).to_vector();
  for (int64_t t = 0; t < 40; ++t) {
    std::vector<float> row(static_cast<size_t>(e));
    for (int64_t j = 0; j < e; ++j) {
      const double x = v[size_t(t * e + j)];
      row[size_t(j)] = t % 3 == 0 ? float(x) : float(std::round(x * 2.0) / 2.0);
    }
    rows.push_back(row);
  }
  rows.push_back(std::vector<float>(static_cast<size_t>(e), 0.25f));
  return rows;
}

// The selection and the sigmoid row run once per ISA, with that ISA active (isa_test.h).
class MegaGateIsa : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(MegaGateIsa);

TEST_P(MegaGateIsa, SimdSelectionEqualsANaiveReference) {
  // Plain top-k: widths below, at and off the vector width, k from 1 to E (k > 2·W has no bound),
  // a row wider than the packed candidates hold, 9 to 16 candidates (ranked in two vectors: ties
  // across them).
  for (auto [e, k] : {std::array<int64_t, 2>{5, 2}, {8, 8}, {64, 8}, {64, 1}, {64, 16}, {64, 17},
                      {64, 64}, {37, 9}, {256, 8}, {600, 8}, {16, 12}, {16, 3}, {13, 10}}) {
    GateSpec g;
    g.top_k = k;
    for (const auto& row : tie_rows(e, uint64_t(e * 100 + k))) {
      std::vector<std::pair<float, int64_t>> by(row.size());
      for (size_t j = 0; j < row.size(); ++j) by[j] = {row[j], int64_t(j)};
      std::sort(by.begin(), by.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      std::vector<int64_t> want;
      for (int64_t j = 0; j < k; ++j) want.push_back(by[size_t(j)].second);
      ASSERT_EQ(select_on(isa(), row, g), want) << " e " << e << " k " << k;
    }
  }
  // Group-limited: DeepSeek-V3's shape, groups off the vector width (12 and 3 per group), every
  // kept expert selected (k = topk_group · per), fewer kept top-2s than k, rows wider than the
  // packed candidates hold (600 and 1200). The lane path (groups of whole vectors, at most 8 of
  // them): fewer groups than lanes (4 and 2, the rest padded), k below 2 · topk_group, the widest
  // row it takes (512), one group kept.
  for (auto [e, ng, kg, k] :
       {std::array<int64_t, 4>{256, 8, 4, 8}, {96, 8, 4, 8}, {24, 8, 3, 9}, {64, 8, 2, 16},
        {48, 4, 1, 3}, {1200, 8, 4, 8}, {128, 4, 3, 5}, {64, 2, 1, 8}, {512, 8, 4, 8},
        {256, 8, 1, 3}, {128, 8, 8, 128}}) {
    GateSpec g;
    g.score = GateScore::sigmoid;
    g.top_k = k;
    g.n_group = ng;
    g.topk_group = kg;
    for (const auto& row : tie_rows(e, uint64_t(e + ng + kg + k))) {
      const auto want = naive_group_selection(row, g);
      ASSERT_EQ(select_on(isa(), row, g), want) << " e " << e << " n_group " << ng << " k " << k;
    }
  }
}

TEST_P(MegaGateIsa, NanRowsKeepTheOriginalInsertionOrder) {
  // The original kernel inserts every value with a strict '>': a NaN is never larger than
  // anything, so it enters only while fewer than k are held (at the end), and no later value is
  // larger than it: [1, NaN, 3, 2], k = 2 → {0, 1}. The SIMD paths keep exactly this.
  GateSpec g;
  g.top_k = 2;
  const float nan = std::nanf("");
  EXPECT_EQ(select_on(isa(), {1.0f, nan, 3.0f, 2.0f}, g), (std::vector<int64_t>{0, 1}));
  // A NaN once k are held is skipped: the two largest numbers (6 at 6 and 13 → NaN; 5 at 5).
  std::vector<float> nan_row(20);
  for (size_t j = 0; j < nan_row.size(); ++j) nan_row[j] = float(j % 7);
  nan_row[13] = nan;
  EXPECT_EQ(select_on(isa(), nan_row, g), (std::vector<int64_t>{6, 5}));
  // Group-limited: NaN is ignored by the group scores and the bound; every ISA agrees.
  g.score = GateScore::sigmoid;
  g.top_k = 4;
  g.n_group = 4;
  g.topk_group = 2;
  for (const auto& clean : tie_rows(32, 11)) {
    std::vector<float> row = clean;
    row[5] = nan;
    row[30] = nan;
    const auto want = select_on(kernels::Isa::scalar, row, g);
    EXPECT_EQ(select_on(isa(), row, g), want);
  }
}

TEST_P(MegaGateIsa, InfinitiesTakeTheOriginalSteps) {
  // -inf scores (an expert masked off) tie with each other, and a group whose top-2 are +inf and
  // -inf scores NaN (+inf + -inf), which the insertion over groups orders its own way: the lane
  // path must fall back to it. The portable path is the original kernel's steps.
  GateSpec g;
  g.score = GateScore::sigmoid;
  g.top_k = 8;
  g.n_group = 8;
  g.topk_group = 4;
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& clean : tie_rows(256, 21)) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> row = clean;
      if (variant == 0)  // groups 1 and 5 entirely -inf, group 2 half -inf
        for (int64_t j = 0; j < 256; ++j)
          if (j / 32 == 1 || j / 32 == 5 || (j / 32 == 2 && j % 2 == 0)) row[size_t(j)] = -inf;
      if (variant == 1) {  // group 3: one +inf, the rest -inf (score NaN); group 6: two +inf
        for (int64_t j = 96; j < 128; ++j) row[size_t(j)] = -inf;
        row[100] = inf;
        row[200] = row[230] = inf;
      }
      if (variant == 2)  // every value -inf
        std::fill(row.begin(), row.end(), -inf);
      const auto want = select_on(kernels::Isa::scalar, row, g);
      ASSERT_EQ(select_on(isa(), row, g), want) << "variant " << variant;
      if (variant != 1) {
        ASSERT_EQ(want, naive_group_selection(row, g)) << "variant " << variant;
      }
    }
  }
}

TEST_P(MegaGateIsa, SigmoidRowEqualsTheElementwiseKernelsBitwise) {
  const kernels::EwTable& ew = kernels::kernel_table<kernels::EwTable>();
  const GateSigmoidTopKFn row_fn = kernels::kernel_table<GateTopKTable>().sigmoid_topk;
  // AVX-512's elementwise sigmoid is not the AVX2 one the row would compute: no fused row there.
  if (isa() == kernels::Isa::avx512) {
    EXPECT_EQ(row_fn, nullptr);
    return;
  }
  ASSERT_NE(row_fn, nullptr);
  // The one-pass sigmoid row (gate_topk.h) against the elementwise kernels' sigmoid and add of the
  // same ISA (what the tensor ops run) and the selection on their result: p and c bit for bit, the
  // same experts. Widths on and off the vector width, group-limited in lanes (256 / 8, 64 / 2) and
  // not (48 / 4), plain, with and without a bias, rows holding NaN and ±inf logits.
  for (auto [e, ng, kg, k] : {std::array<int64_t, 4>{256, 8, 4, 8}, {64, 2, 1, 8}, {48, 4, 2, 3},
                              {37, 1, 1, 5}, {64, 1, 1, 8}}) {
    GateSpec g;
    g.score = GateScore::sigmoid;
    g.top_k = k;
    g.n_group = ng;
    g.topk_group = kg;
    manual_seed(uint64_t(e + ng));
    Tensor logits = mul(randn({12, e}), 3.0);
    float* lp = logits.data<float>();
    lp[3] = std::nanf("");
    lp[e + 1] = std::numeric_limits<float>::infinity();
    lp[2 * e + 2] = -std::numeric_limits<float>::infinity();
    const auto ue = static_cast<size_t>(e), uk = static_cast<size_t>(k),
               ug = static_cast<size_t>(ng);
    for (bool with_bias : {false, true}) {
      const Tensor bias = with_bias ? mul(randn({e}), 0.5) : Tensor();
      const float* bp = with_bias ? bias.data<float>() : nullptr;
      for (int64_t t = 0; t < 12; ++t) {
        std::vector<float> p(ue), c(ue, -1.0f), val(uk), gval(ug), top2(2 * ug), kept2(2 * ug);
        std::vector<int64_t> idx(uk), gidx(ug);
        std::vector<char> keep(ug);
        row_fn(lp + t * e, bp, p.data(), c.data(), GateTopKShape{e, k, ng, kg},
               GateTopKScratch{idx.data(), val.data(), gidx.data(), gval.data(), top2.data(),
                               kept2.data(), keep.data()});
        std::vector<float> p_ref(ue), c_ref(ue);
        const float* in1[1] = {lp + t * e};
        ew.f32[int(kernels::EwOp::sigmoid)](p_ref.data(), in1, e, nullptr);
        c_ref = p_ref;
        if (with_bias) {
          const float* in2[2] = {p_ref.data(), bp};
          ew.f32[int(kernels::EwOp::add)](c_ref.data(), in2, e, nullptr);
          ASSERT_EQ(std::memcmp(c.data(), c_ref.data(), ue * 4), 0) << "c, e " << e << " row " << t;
        }
        ASSERT_EQ(std::memcmp(p.data(), p_ref.data(), ue * 4), 0) << "p, e " << e << " row " << t;
        ASSERT_EQ(idx, select_on(isa(), c_ref, g))
            << " e " << e << " row " << t << " bias " << with_bias;
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
}  // namespace hp::moe
