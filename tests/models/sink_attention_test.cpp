// The flash kernel's sliding window and sinks (scaled_dot_product_attention_lse) against the
// bias-based composition (models/sink_attention.h) it replaces: outputs and the gradients of q, k,
// v and the sinks, per ISA, within f32 rounding (both run in f32; the composition materializes
// [B, H, T, T] scores, the kernel never does).
#include "hp/models/sink_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "expect_close.h"
#include "hp/core/random.h"
#include "hp/ops/attention.h"
#include "hp/ops/ops.h"
#include "isa_test.h"

namespace hp::models {
namespace {

struct Grads {
  Tensor o, dq, dk, dv, dsinks;
};

// Σ o · w for a fixed random w, backward; kv heads: 1 (DeepSeek-V4's one K=V head) or H.
Grads run(bool kernel, int64_t b, int64_t h, int64_t hk, int64_t t, int64_t d, int64_t window,
          bool with_sinks, uint64_t seed) {
  manual_seed(seed);
  Tensor q = randn({b, h, t, d}), k = randn({b, hk, t, d}), v = randn({b, hk, t, d});
  Tensor sinks = with_sinks ? randn({h}) : Tensor(), w = randn({b, h, t, d});
  for (const Tensor* x : {&q, &k, &v, &sinks})
    if (x->defined()) x->requires_grad_();
  const double scale = 1.0 / std::sqrt(double(d));
  Tensor o;
  if (kernel) {
    AttentionOpts opts;
    opts.scale = scale;
    opts.window = window;
    opts.sinks = sinks;
    o = scaled_dot_product_attention_lse(q, k, v, opts).out;
  } else {
    o = biased_attention(q, k, v, sliding_window_bias(t, window), sinks, scale);
  }
  sum(mul(o, w)).backward();
  return {o.detach(), q.grad(), k.grad(), v.grad(), with_sinks ? sinks.grad() : Tensor()};
}

// Tolerance floor 1 (expect_close): dq, dk with window 1 and no sink are exactly zero in exact
// arithmetic (a softmax over one key), and both sides hold rounding noise of the O(1) inputs.
void expect_near(const Tensor& a, const Tensor& b, double rel, const std::string& what) {
  testing::expect_close(a, b, rel, what, 1.0);
}

class SinkAttentionIsa : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(SinkAttentionIsa);

TEST_P(SinkAttentionIsa, KernelMatchesBiasedComposition) {
  uint64_t seed = 1;
  for (int64_t window : {0, 1, 7, 64, 100})
    for (bool sinks : {false, true})
      for (int64_t hk : {1, 4}) {
        const Grads a = run(true, 2, 4, hk, 150, 24, window, sinks, seed);
        const Grads r = run(false, 2, 4, hk, 150, 24, window, sinks, seed++);
        const std::string what = std::string(isa_label()) + " window=" + std::to_string(window) +
                                 " sinks=" + std::to_string(sinks) + " hk=" + std::to_string(hk);
        expect_near(a.o, r.o, 2e-5, what + " o");
        expect_near(a.dq, r.dq, 2e-5, what + " dq");
        expect_near(a.dk, r.dk, 2e-5, what + " dk");
        expect_near(a.dv, r.dv, 2e-5, what + " dv");
        if (sinks) expect_near(a.dsinks, r.dsinks, 2e-5, what + " dsinks");
      }
}

// The lse output is differentiable: merging two key sets by their lse equals attention over both.
TEST(SinkAttention, LseMergeEqualsAttentionOverTheUnion) {
  manual_seed(7);
  const int64_t b = 1, h = 2, t = 40, d = 16, n = 8;
  Tensor q = randn({b, h, t, d}), k = randn({b, 1, t, d}), extra = randn({b, 1, n, d});
  Tensor sinks = randn({h});
  for (const Tensor* x : {&q, &k, &extra, &sinks}) x->requires_grad_();
  const double scale = 1.0 / std::sqrt(double(d));
  AttentionOpts opts;
  opts.scale = scale;
  opts.window = 9;
  opts.sinks = sinks;
  const AttentionOut main = scaled_dot_product_attention_lse(q, k, k, opts);
  // Extra keys visible to every query: softmax over [extra scores | lse_main], the last column
  // carrying the main branch's normalized output.
  Tensor se = mul(matmul(q, transpose(extra, -1, -2)), scale);  // [B, H, T, n]
  Tensor p = softmax(cat({se, unsqueeze(main.lse, -1)}, -1), -1);
  Tensor o = add(matmul(narrow(p, -1, 0, n), extra), mul(narrow(p, -1, n, 1), main.out));
  Tensor w = randn(o.shape());
  sum(mul(o, w)).backward();
  const Tensor gq = q.grad(), gk = k.grad(), ge = extra.grad(), gs = sinks.grad();
  for (const Tensor* x : {&q, &k, &extra, &sinks}) x->zero_grad();
  // Reference: one biased attention over [window keys | extra keys].
  Tensor bias = cat({sliding_window_bias(t, 9), zeros({t, n})}, -1);
  Tensor kv = cat({k, extra}, 2);
  Tensor ref = biased_attention(q, kv, kv, bias, sinks, scale);
  sum(mul(ref, w)).backward();
  expect_near(o.detach(), ref.detach(), 2e-5, "o");
  expect_near(gq, q.grad(), 2e-5, "dq");
  expect_near(gk, k.grad(), 2e-5, "dk");
  expect_near(ge, extra.grad(), 2e-5, "dextra");
  expect_near(gs, sinks.grad(), 2e-5, "dsinks");
}

}  // namespace
}  // namespace hp::models
