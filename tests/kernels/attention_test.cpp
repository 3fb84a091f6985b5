// Flash attention forward/backward against a materialized-softmax double-precision reference.
//
// Tolerance: |x - ref| <= 2e-5 · max(max|ref|, 0.1) per output tensor (normwise; f32 kernels sum
// up to T_kv = 200 products of length D <= 128, each rounding at about 6e-8 relative, and exp2 adds
// <= 2e-7). Inputs are O(1), so the 0.1 floor only matters for gradients that are exactly zero in
// exact arithmetic (dq, dk at T = 1, where the softmax has one entry). The worst observed
// err / max|ref| is printed; errors are printed on failure.
#include "hp/kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

struct Case {
  int64_t B, Hq, Hkv, T, Tkv, D;
  bool causal;
  bool bthd;  // [B, T, H, D] layout instead of [B, H, T, D]
};

// One [B, H, T, D] operand stored in either layout.
struct Heads {
  int64_t H, T, D;
  AttentionStrides s;
  std::vector<float> data;
  Heads(int64_t B, int64_t H_, int64_t T_, int64_t D_, bool bthd) : H(H_), T(T_), D(D_) {
    s = bthd ? attention_strides_bthd(H, T, D) : attention_strides_bhtd(H, T, D);
    data.assign(B * H * T * D, 0.0f);
  }
  float& at(int64_t b, int64_t h, int64_t t, int64_t d) {
    return data[b * s.b + h * s.h + t * s.t + d];
  }
  void fill(std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (auto& x : data) x = u(rng);
  }
  AttentionInput in() const { return {data.data(), s}; }
  AttentionOutput out() { return {data.data(), s}; }
};

struct Result {
  std::vector<float> o, lse, dq, dk, dv, dsinks;
};

struct Problem {
  Case c;
  Heads q, k, v, g;  // g: output gradient
  // Document ids [B, T] and [B, Tkv] (empty: no segments).
  std::vector<int32_t> seg_q, seg_kv;
  int64_t window = 0;         // sliding window (0: none)
  std::vector<float> sinks;   // [Hq] (empty: none)
  std::vector<float> dlse;    // [B, Hq, T] lse gradient (empty: none)
  bool visible(int64_t b, int64_t i, int64_t j) const {
    if (c.causal && j > i) return false;
    if (window > 0 && i - j >= window) return false;
    return seg_q.empty() || seg_q[b * c.T + i] == seg_kv[b * c.Tkv + j];
  }
  Problem(const Case& c_, uint32_t seed)
      : c(c_),
        q(c.B, c.Hq, c.T, c.D, c.bthd),
        k(c.B, c.Hkv, c.Tkv, c.D, c.bthd),
        v(c.B, c.Hkv, c.Tkv, c.D, c.bthd),
        g(c.B, c.Hq, c.T, c.D, c.bthd) {
    std::mt19937 rng(seed);
    q.fill(rng, -2.0f, 2.0f);  // wide enough that softmax rows are far from uniform
    k.fill(rng, -2.0f, 2.0f);
    v.fill(rng, -1.0f, 1.0f);
    g.fill(rng, -1.0f, 1.0f);
  }
  AttentionShape shape() const { return {c.B, c.Hq, c.Hkv, c.T, c.Tkv, c.D}; }

  Result run() const {
    AttentionOptions opt;
    opt.causal = c.causal;
    if (!seg_q.empty()) opt.segments = {seg_q.data(), c.T, seg_kv.data(), c.Tkv};
    opt.window = window;
    opt.sinks = sinks.empty() ? nullptr : sinks.data();
    std::vector<float> dsinks(sinks.size());
    Heads o(c.B, c.Hq, c.T, c.D, c.bthd), dq(c.B, c.Hq, c.T, c.D, c.bthd);
    Heads dk(c.B, c.Hkv, c.Tkv, c.D, c.bthd), dv(c.B, c.Hkv, c.Tkv, c.D, c.bthd);
    std::vector<float> lse(c.B * c.Hq * c.T);
    attention_forward(shape(), opt, q.in(), k.in(), v.in(), o.out(), lse.data());
    attention_backward(shape(), opt, q.in(), k.in(), v.in(), o.in(), lse.data(), g.in(), dq.out(),
                       dk.out(), dv.out(), dlse.empty() ? nullptr : dlse.data(),
                       dsinks.empty() ? nullptr : dsinks.data());
    return {o.data, lse, dq.data, dk.data, dv.data, dsinks};
  }

  // Materialized softmax in double; results laid out like the operands.
  Result reference() {
    Heads o(c.B, c.Hq, c.T, c.D, c.bthd), dq(c.B, c.Hq, c.T, c.D, c.bthd);
    Heads dk(c.B, c.Hkv, c.Tkv, c.D, c.bthd), dv(c.B, c.Hkv, c.Tkv, c.D, c.bthd);
    std::vector<float> lse(c.B * c.Hq * c.T);
    std::vector<double> dk_acc(c.B * c.Hkv * c.Tkv * c.D), dv_acc(dk_acc.size());
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    std::vector<double> p(c.Tkv), dp(c.Tkv), dsinks(sinks.size());
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t hk = h / (c.Hq / c.Hkv);
        for (int64_t i = 0; i < c.T; ++i) {
          // Keys [0, nvis) hold every visible one; p = 0 for the hidden ones among them.
          const int64_t nvis = c.causal ? std::min(c.Tkv, i + 1) : c.Tkv;
          double mx = -INFINITY;
          for (int64_t j = 0; j < nvis; ++j) {
            double s = 0;
            for (int64_t d = 0; d < c.D; ++d) s += double(q.at(b, h, i, d)) * k.at(b, hk, j, d);
            p[j] = visible(b, i, j) ? s * scale : -INFINITY;
            mx = std::max(mx, p[j]);
          }
          const double z = sinks.empty() ? -INFINITY : sinks[h];
          if (mx == -INFINITY && sinks.empty()) {  // no visible key: o = 0, lse = -inf, no gradient
            lse[(b * c.Hq + h) * c.T + i] = -INFINITY;
            for (int64_t d = 0; d < c.D; ++d) o.at(b, h, i, d) = 0, dq.at(b, h, i, d) = 0;
            continue;
          }
          mx = std::max(mx, z);
          double sum = std::exp(z - mx);  // the sink's share of the denominator (0 without one)
          for (int64_t j = 0; j < nvis; ++j) sum += (p[j] = std::exp(p[j] - mx));
          lse[(b * c.Hq + h) * c.T + i] = static_cast<float>(mx + std::log(sum));
          const double p_sink = std::exp(z - mx) / sum;
          double delta = dlse.empty() ? 0.0 : -double(dlse[(b * c.Hq + h) * c.T + i]);
          for (int64_t j = 0; j < nvis; ++j) {
            p[j] /= sum;
            dp[j] = 0;
            for (int64_t d = 0; d < c.D; ++d) dp[j] += double(g.at(b, h, i, d)) * v.at(b, hk, j, d);
            delta += p[j] * dp[j];
          }
          if (!sinks.empty()) dsinks[h] -= p_sink * delta;
          for (int64_t d = 0; d < c.D; ++d) {
            double od = 0, dqd = 0;
            for (int64_t j = 0; j < nvis; ++j) {
              const double ds = p[j] * (dp[j] - delta);
              od += p[j] * v.at(b, hk, j, d);
              dqd += ds * k.at(b, hk, j, d) * scale;
              const int64_t kv = ((b * c.Hkv + hk) * c.Tkv + j) * c.D + d;
              dv_acc[kv] += p[j] * g.at(b, h, i, d);
              dk_acc[kv] += ds * q.at(b, h, i, d) * scale;
            }
            o.at(b, h, i, d) = static_cast<float>(od);
            dq.at(b, h, i, d) = static_cast<float>(dqd);
          }
        }
      }
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t j = 0; j < c.Tkv; ++j)
          for (int64_t d = 0; d < c.D; ++d) {
            const int64_t kv = ((b * c.Hkv + h) * c.Tkv + j) * c.D + d;
            dk.at(b, h, j, d) = static_cast<float>(dk_acc[kv]);
            dv.at(b, h, j, d) = static_cast<float>(dv_acc[kv]);
          }
    return {o.data, lse, dq.data, dk.data, dv.data, std::vector<float>(dsinks.begin(), dsinks.end())};
  }
};

double g_worst_ratio = 0;

void expect_close(const char* what, const std::vector<float>& x, const std::vector<float>& ref,
                  const Case& c) {
  ASSERT_EQ(x.size(), ref.size());
  double ref_max = 0, err = 0;
  for (float r : ref)
    if (std::isfinite(r)) ref_max = std::max(ref_max, double(std::fabs(r)));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(x[i])) {  // -inf lse: a query that sees no key
      EXPECT_EQ(x[i], ref[i]) << what << "[" << i << "]";
      continue;
    }
    err = std::max(err, std::fabs(double(x[i]) - ref[i]));
  }
  const double denom = std::max(ref_max, 0.1);
  g_worst_ratio = std::max(g_worst_ratio, err / denom);
  EXPECT_LE(err, 2e-5 * denom) << what << ": max err " << err << " (max |ref| " << ref_max
                               << ") B=" << c.B << " Hq=" << c.Hq << " Hkv=" << c.Hkv
                               << " T=" << c.T << " Tkv=" << c.Tkv << " D=" << c.D
                               << " causal=" << c.causal << " bthd=" << c.bthd;
}

void check_problem(Problem& p) {
  const Case& c = p.c;
  Result got = p.run(), ref = p.reference();
  expect_close("o", got.o, ref.o, c);
  expect_close("lse", got.lse, ref.lse, c);
  expect_close("dq", got.dq, ref.dq, c);
  expect_close("dk", got.dk, ref.dk, c);
  expect_close("dv", got.dv, ref.dv, c);
  expect_close("dsinks", got.dsinks, ref.dsinks, c);
}

void check_case(const Case& c, uint32_t seed) {
  Problem p(c, seed);
  check_problem(p);
}

// Document ids of `rows` rows of n tokens: each row cut into documents whose lengths are drawn
// from `lengths` in turn (cycling from a row-dependent start; the last one cut at n).
std::vector<int32_t> segment_layout(int64_t rows, int64_t n, const std::vector<int64_t>& lengths) {
  std::vector<int32_t> seg(static_cast<size_t>(rows * n));
  for (int64_t b = 0; b < rows; ++b) {
    int32_t id = 0;
    size_t next = static_cast<size_t>(b) % lengths.size();
    for (int64_t t = 0, left = lengths[next]; t < n; ++t) {
      if (left == 0) ++id, next = (next + 1) % lengths.size(), left = lengths[next];
      seg[b * n + t] = id, --left;
    }
  }
  return seg;
}

// Random document lengths in [1, max_len], with some 1s, reproducible from seed.
std::vector<int64_t> random_lengths(uint32_t seed, int64_t max_len) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(1, max_len);
  std::vector<int64_t> out;
  for (int i = 0; i < 12; ++i) out.push_back(i % 4 == 1 ? 1 : d(rng));
  return out;
}

void check_segments(const Case& c, const std::vector<int64_t>& lengths, uint32_t seed) {
  Problem p(c, seed);
  p.seg_q = segment_layout(c.B, c.T, lengths);
  p.seg_kv = c.T == c.Tkv ? p.seg_q : segment_layout(c.B, c.Tkv, lengths);
  check_problem(p);
}

// Every test that runs a kernel runs once per ISA with that ISA's block products and exp2 (the
// AVX-512 and AVX2 SIMD kernels, the scalar fallback); an ISA this CPU lacks is skipped.
class AttentionIsa : public test::IsaTest {
 protected:
  void SetUp() override {
    test::IsaTest::SetUp();
    g_worst_ratio = 0;  // the printed worst error is this test's, at this ISA
  }
};
HP_INSTANTIATE_ISA_TESTS(AttentionIsa);

// Head dims: whole AVX-512 vectors (16, 64, 80, 128), whole AVX2 vectors only (24, 40: padded
// copies at 16 lanes), neither (5, 20 in the tests below); T around the 64-token block.
TEST_P(AttentionIsa, MatchesReferenceAcrossShapes) {
  uint32_t seed = 1;
  for (bool causal : {true, false})
    for (int64_t hkv : {4, 2, 1})
      for (int64_t T : {1, 5, 67, 130})
        for (int64_t D : {16, 24, 64, 80}) check_case({1, 4, hkv, T, T, D, causal, false}, seed++);
  for (bool causal : {true, false})
    for (int64_t D : {40, 128}) check_case({1, 2, 1, 150, 150, D, causal, false}, seed++);
  std::printf("%s: worst err / max|ref| so far: %.3g\n", isa_label(), g_worst_ratio);
}

TEST_P(AttentionIsa, BthdLayoutBatchAndOddHeadDim) {
  uint32_t seed = 100;
  for (bool causal : {true, false}) {
    check_case({2, 4, 2, 67, 67, 64, causal, true}, seed++);
    check_case({2, 2, 1, 130, 130, 20, causal, true}, seed++);  // D % 8 != 0: padded operands
    check_case({1, 3, 3, 9, 9, 5, causal, false}, seed++);
  }
}

TEST_P(AttentionIsa, QueryAndKeyLengthsDiffer) {
  uint32_t seed = 200;
  for (bool causal : {true, false}) {
    check_case({1, 2, 1, 67, 130, 16, causal, false}, seed++);
    check_case({1, 2, 1, 130, 67, 16, causal, true}, seed++);
  }
}

TEST_P(AttentionIsa, MatchesReference) {
  check_case({1, 4, 2, 130, 130, 64, true, false}, 300);
  check_case({1, 2, 2, 67, 67, 20, false, true}, 301);
}

// Packed documents: random layouts with documents of length 1, documents spanning and ending on
// 64-token block edges, a row that is one document, GQA, odd head dims.
TEST_P(AttentionIsa, SegmentsMatchReference) {
  uint32_t seed = 600;
  for (int64_t T : {1, 9, 67, 130, 200}) {
    check_segments({2, 4, 2, T, T, 16, true, false}, random_lengths(seed, 40), seed), ++seed;
    check_segments({2, 2, 1, T, T, 20, true, true}, random_lengths(seed, 90), seed), ++seed;
  }
  check_segments({1, 2, 2, 130, 130, 64, true, false}, {130}, seed++);            // one document
  check_segments({1, 2, 2, 130, 130, 64, true, false}, {1}, seed++);              // all length 1
  check_segments({2, 2, 1, 200, 200, 32, true, false}, {64, 64, 1, 71}, seed++);  // block edges
  check_segments({1, 2, 1, 130, 130, 16, false, false}, {50, 1, 30}, seed++);     // not causal
  std::printf("%s: worst err / max|ref| so far: %.3g\n", isa_label(), g_worst_ratio);
}

// Different query and key ids (as a context-parallel block would pass): some queries see no
// key at all and get o = 0, lse = -inf and no gradient.
TEST_P(AttentionIsa, SegmentsWithQueriesThatSeeNoKey) {
  Problem p({1, 2, 1, 67, 130, 16, false, false}, 700);
  p.seg_q = segment_layout(1, 67, {20, 47});  // ids 0, 1
  p.seg_kv.assign(130, 1);
  for (int64_t j = 0; j < 70; ++j) p.seg_kv[j] = 1;
  for (int64_t j = 70; j < 130; ++j) p.seg_kv[j] = 2;  // no key has id 0: 20 queries see none
  check_problem(p);
  Result got = p.run();
  EXPECT_EQ(got.lse[0], -INFINITY);
  EXPECT_EQ(got.o[0], 0.0f);
}

TEST(Attention, SegmentsRejectDecreasingIds) {
  Problem p({1, 2, 2, 5, 5, 16, true, false}, 800);
  p.seg_q = {0, 0, 1, 0, 1};
  p.seg_kv = p.seg_q;
  try {
    p.run();
    FAIL() << "decreasing ids accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("must not decrease along a row: row 0 has 1 then 0 at "
                                         "token 3"),
              std::string::npos)
        << e.what();
  }
}

// p's outputs and gradients (the sinks' too, when it has them) at 1 and 2 threads: bitwise equal.
void expect_thread_count_bitwise(const Problem& p) {
  const int prev = num_threads();
  set_num_threads(1);
  const Result one = p.run();
  set_num_threads(2);
  const Result two = p.run();
  set_num_threads(prev);
  for (auto [a, b] : {std::pair{&one.o, &two.o},
                      {&one.lse, &two.lse},
                      {&one.dq, &two.dq},
                      {&one.dk, &two.dk},
                      {&one.dv, &two.dv},
                      {&one.dsinks, &two.dsinks}}) {
    ASSERT_EQ(a->size(), b->size());
    // A problem without sinks has empty dsinks, whose data() may be null: memcmp must not see it.
    if (!a->empty()) {
      EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * 4));
    }
  }
}

TEST_P(AttentionIsa, SegmentsBitwiseIdenticalAcrossThreadCounts) {
  Problem p({2, 4, 2, 200, 200, 64, true, false}, 900);
  p.seg_q = segment_layout(2, 200, {37, 1, 90, 64});
  p.seg_kv = p.seg_q;
  expect_thread_count_bitwise(p);
}

TEST_P(AttentionIsa, BitwiseIdenticalAcrossThreadCounts) {
  expect_thread_count_bitwise(Problem({2, 4, 2, 200, 200, 64, true, false}, 400));
}

// Sliding window, sinks and the lse gradient (alone and together, with GQA, odd head dims, T not
// a multiple of the 64-token block, windows smaller and larger than a block, packed documents).
TEST_P(AttentionIsa, WindowSinksAndLseGradientMatchReference) {
  uint32_t seed = 1000;
  for (int64_t window : {1, 5, 64, 70, 500})
    for (bool sinks : {false, true}) {
      for (const Case& c : {Case{2, 4, 2, 130, 130, 16, true, false},
                            Case{1, 2, 1, 200, 200, 20, true, true},
                            Case{1, 2, 2, 67, 130, 16, true, false},
                            Case{1, 2, 2, 130, 67, 32, true, false}}) {
        Problem p(c, seed++);
        p.window = window;
        if (sinks) p.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
        p.sinks.resize(sinks ? c.Hq : 0);
        check_problem(p);
      }
    }
  // A window wider than any row (up to the int64 limit) equals no window.
  for (int64_t window : {int64_t{131}, std::numeric_limits<int64_t>::max()}) {
    Problem p({1, 2, 1, 130, 130, 16, true, false}, seed++);
    p.window = window;
    check_problem(p);
  }
  // Sinks without a window (non-causal too), then the lse gradient with and without sinks.
  for (bool causal : {true, false}) {
    Problem p({1, 4, 2, 130, 130, 16, causal, false}, seed++);
    p.sinks = {1.5f, -0.5f, 3.0f, -2.0f};
    check_problem(p);
  }
  for (bool sinks : {false, true}) {
    Problem p({2, 2, 1, 130, 130, 16, true, false}, seed++);
    p.window = sinks ? 40 : 0;
    if (sinks) p.sinks = {0.25f, -0.75f};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    p.dlse.resize(2 * 2 * 130);
    for (float& x : p.dlse) x = u(rng);
    check_problem(p);
  }
  // Window with packed documents, and a query that sees no key but has a sink (o = 0,
  // lse = sink).
  Problem w({2, 2, 1, 200, 200, 16, true, false}, seed++);
  w.window = 30;
  w.seg_q = segment_layout(2, 200, {37, 1, 90, 64});
  w.seg_kv = w.seg_q;
  w.sinks = {0.5f, -0.5f};
  check_problem(w);
  Problem none({1, 2, 1, 67, 130, 16, false, false}, seed++);
  none.seg_q.assign(67, 0);
  none.seg_kv.assign(130, 1);
  none.sinks = {0.5f, -0.5f};
  check_problem(none);
  Result got = none.run();
  EXPECT_EQ(got.o[0], 0.0f);
  EXPECT_NEAR(got.lse[0], 0.5f, 1e-6);
  std::printf("%s: worst err / max|ref| so far: %.3g\n", isa_label(), g_worst_ratio);
}

TEST_P(AttentionIsa, WindowAndSinksBitwiseIdenticalAcrossThreadCounts) {
  Problem p({2, 4, 2, 200, 200, 64, true, false}, 1100);
  p.window = 50;
  p.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  expect_thread_count_bitwise(p);
}

TEST_P(AttentionIsa, Exp2Accuracy) {
  std::vector<float> x, y(0);
  for (double t = -125.0; t <= 127.0; t += 0.000731) x.push_back(static_cast<float>(t));
  for (float t : {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 126.999f}) x.push_back(t);
  y.resize(x.size());
  detail::attention_exp2(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp2(double(x[i]));
    worst = std::max(worst, std::fabs(y[i] - ref) / ref);
  }
  std::printf("%s exp2 max relative error: %.3g\n", isa_label(), worst);
  EXPECT_LE(worst, 2e-7);
  std::vector<float> edge = {-INFINITY, -200.0f, -127.0f, 0.0f}, out(4);
  detail::attention_exp2(edge.data(), out.data(), 4);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_LT(out[2], 0x1p-126f);  // flushed to zero (SIMD) or subnormal (scalar std::exp2)
  EXPECT_EQ(out[3], 1.0f);
}

TEST(Attention, RejectsBadInput) {
  Problem p({1, 4, 2, 5, 5, 16, true, false}, 500);
  std::vector<float> o(p.q.data.size()), lse(20);
  AttentionOutput out{o.data(), p.q.s};
  auto fwd = [&](AttentionShape s, AttentionOptions opt) {
    attention_forward(s, opt, p.q.in(), p.k.in(), p.v.in(), out, lse.data());
  };
  auto message = [&](AttentionShape s, AttentionOptions opt) -> std::string {
    try {
      fwd(s, opt);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({1, 4, 3, 5, 5, 16}, {}).find("heads_q=4 is not a multiple of heads_kv=3"),
            std::string::npos);
  EXPECT_NE(message({1, 4, 2, 5, 5, 0}, {}).find("head_dim=0"), std::string::npos);
  EXPECT_NE(message({1, 4, 2, -1, 5, 16}, {}).find("seq_q=-1"), std::string::npos);
  EXPECT_NE(message({1, 4, 2, 5, 0, 16}, {}).find("seq_kv=0"), std::string::npos);
  AttentionOptions bf;
  bf.dtype = DType::bf16;
  EXPECT_NE(message(p.shape(), bf).find("dtype bf16"), std::string::npos);
  AttentionOptions nan_scale;
  nan_scale.scale = NAN;
  EXPECT_NE(message(p.shape(), nan_scale).find("scale=nan"), std::string::npos);
  AttentionOptions bad_window;
  bad_window.window = -2;
  EXPECT_NE(message(p.shape(), bad_window).find("window=-2 must be >= 0"), std::string::npos);
  bad_window.window = 4;
  bad_window.causal = false;
  EXPECT_NE(message(p.shape(), bad_window).find("window=4 needs causal"), std::string::npos);
  std::vector<float> bad_sinks = {0.0f, INFINITY, 0.0f, 0.0f};
  AttentionOptions inf_sink;
  inf_sink.sinks = bad_sinks.data();
  EXPECT_NE(message(p.shape(), inf_sink).find("sinks[1]=inf is not finite"), std::string::npos);
  EXPECT_THROW(
      attention_forward(p.shape(), {}, {nullptr, p.q.s}, p.k.in(), p.v.in(), out, lse.data()),
      ValueError);
  EXPECT_THROW(attention_forward(p.shape(), {}, p.q.in(), p.k.in(), p.v.in(), out, nullptr),
               ValueError);
}

}  // namespace
}  // namespace hp::kernels
