#include <gtest/gtest.h>

#include "gradcheck.h"
#include "hp/ops/attention.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

TEST(AttentionOp, CompositeF64PathGradients) {
  Tensor q = leaf({1, 2, 5, 4}, 1), k = leaf({1, 1, 5, 4}, 2), v = leaf({1, 1, 5, 4}, 3);
  for (bool causal : {true, false})
    expect_gradcheck([causal](const std::vector<Tensor>& in) {
      return scaled_dot_product_attention(in[0], in[1], in[2], causal);
    }, {q, k, v});
}

// The flash kernel (f32) and its fused backward against the f64 composite, for MHA and GQA, with
// q/k/v given as [B, T, H, D] tensors viewed as [B, H, T, D] (no copies).
TEST(AttentionOp, FlashKernelMatchesComposite) {
  for (auto [hq, hkv, t] : std::vector<std::array<int64_t, 3>>{{2, 2, 37}, {4, 2, 70}, {4, 1, 9}}) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE("hq " + std::to_string(hq) + " hkv " + std::to_string(hkv) + " causal " + std::to_string(causal));
      manual_seed(hq * 100 + t);
      const int64_t B = 2, D = 16;
      Tensor q64 = randn({B, t, hq, D}, DType::f64), k64 = randn({B, t, hkv, D}, DType::f64),
             v64 = randn({B, t, hkv, D}, DType::f64), g64 = randn({B, hq, t, D}, DType::f64);
      std::vector<Tensor> leaves64, leaves32;
      for (const Tensor& x : {q64, k64, v64}) {
        Tensor a = x.clone(), b = x.to(DType::f32);
        a.requires_grad_();
        b.requires_grad_();
        leaves64.push_back(a);
        leaves32.push_back(b);
      }
      auto run = [&](const std::vector<Tensor>& l) {
        return scaled_dot_product_attention(transpose(l[0], 1, 2), transpose(l[1], 1, 2),
                                            transpose(l[2], 1, 2), causal);
      };
      Tensor o64 = run(leaves64), o32 = run(leaves32);
      o64.backward(g64);
      o32.backward(g64.to(DType::f32));
      auto close = [](const Tensor& a, const Tensor& b, const char* what) {
        std::vector<double> x = a.to_vector(), y = b.to_vector();
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4 * (1 + std::fabs(y[i]))) << what << " " << i;
      };
      close(o32, o64, "o");
      for (int i = 0; i < 3; ++i) close(leaves32[i].grad(), leaves64[i].grad(), "grad");
    }
  }
}

// q, k, v viewed per head from [B, T, H, D] buffers (as the models make them): the output and the
// gradients come in that layout — transposing them back needs no copy — with the values, bitwise,
// of the same problem on contiguous [B, H, T, D] inputs.
TEST(AttentionOp, HeadViewsGetOutputAndGradientsInTheirLayout) {
  manual_seed(5);
  const int64_t B = 2, T = 40, D = 16;
  std::vector<Tensor> rows = {randn({B, T, 4, D}), randn({B, T, 2, D}), randn({B, T, 2, D})};
  std::vector<Tensor> heads;  // the same values as contiguous [B, H, T, D] leaves
  for (Tensor& x : rows) {
    heads.push_back(contiguous(transpose(x, 1, 2)));
    x.requires_grad_();
    heads.back().requires_grad_();
  }
  const Tensor g = randn({B, 4, T, D});
  const Tensor o_rows = scaled_dot_product_attention(
      transpose(rows[0], 1, 2), transpose(rows[1], 1, 2), transpose(rows[2], 1, 2), true);
  const Tensor o_heads = scaled_dot_product_attention(heads[0], heads[1], heads[2], true);
  EXPECT_TRUE(transpose(o_rows, 1, 2).is_contiguous());
  EXPECT_TRUE(o_heads.is_contiguous());
  EXPECT_EQ(o_rows.to_vector(), o_heads.to_vector());
  o_rows.backward(g);
  o_heads.backward(g);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_TRUE(rows[i].grad().is_contiguous()) << i;
    EXPECT_EQ(transpose(rows[i].grad(), 1, 2).to_vector(), heads[i].grad().to_vector()) << i;
  }
}

// Sliding window, sinks and the lse output: gradcheck of the f64 composite (through o and lse,
// sinks included), then the f32 kernel against it.
TEST(AttentionOp, WindowSinksAndLseMatchComposite) {
  Tensor q = leaf({1, 2, 6, 4}, 11), k = leaf({1, 1, 6, 4}, 12), v = leaf({1, 1, 6, 4}, 13);
  Tensor z = leaf({2}, 14);
  auto both = [](const AttentionOut& r) { return add(r.out, unsqueeze(r.lse, -1)); };
  expect_gradcheck([&](const std::vector<Tensor>& in) {
    return both(scaled_dot_product_attention_lse(in[0], in[1], in[2],
                                                 {true, std::nullopt, Tensor(), 3, in[3]}));
  }, {q, k, v, z});
  manual_seed(21);
  const int64_t B = 2, H = 4, T = 70, D = 16;
  std::vector<Tensor> l64 = {randn({B, H, T, D}, DType::f64), randn({B, 2, T, D}, DType::f64),
                             randn({B, 2, T, D}, DType::f64), randn({H}, DType::f64)};
  std::vector<Tensor> l32;
  for (Tensor& x : l64) {
    l32.push_back(x.to(DType::f32));
    x.requires_grad_();
    l32.back().requires_grad_();
  }
  const Tensor g = randn({B, H, T, D}, DType::f64);
  auto run = [&](const std::vector<Tensor>& l) {
    const Tensor o = both(scaled_dot_product_attention_lse(
        l[0], l[1], l[2], {true, std::nullopt, Tensor(), 20, l[3]}));
    sum(mul(o, g.to(o.dtype()))).backward();
    return o;
  };
  const Tensor o64 = run(l64), o32 = run(l32);
  auto close = [](const Tensor& a, const Tensor& b, const char* what) {
    std::vector<double> x = a.to_vector(), y = b.to_vector();
    double scale = 1;
    for (double t : y) scale = std::max(scale, std::fabs(t));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4 * scale) << what << " " << i;
  };
  close(o32, o64, "o + lse");
  for (size_t i = 0; i < l64.size(); ++i) close(l32[i].grad(), l64[i].grad(), "grad");
}

TEST(AttentionOp, Bf16RunsThroughF32AndBadShapesThrow) {
  manual_seed(3);
  Tensor q = randn({1, 2, 8, 16}, DType::bf16);
  q.requires_grad_();
  Tensor o = scaled_dot_product_attention(q, q, q);
  EXPECT_EQ(o.dtype(), DType::bf16);
  sum(o).backward();
  EXPECT_EQ(q.grad().dtype(), DType::bf16);
  EXPECT_THROW(scaled_dot_product_attention(zeros({1, 3, 4, 8}), zeros({1, 2, 4, 8}), zeros({1, 2, 4, 8})), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(zeros({3, 4, 8}), zeros({3, 4, 8}), zeros({3, 4, 8})), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(zeros({1, 2, 4, 8}), zeros({1, 2, 4, 8}), zeros({1, 2, 5, 8})), ValueError);
}

}  // namespace
}  // namespace hp
