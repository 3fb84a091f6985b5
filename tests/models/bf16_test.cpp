// Models whose parameters are all bf16 (the trainer's bf16 compute over f32 master weights): every
// op of forward, loss and backward has a bf16 path, and the loss stays within 1% of f32's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "hp/models/hf/registry.h"
#include "hp/mx/convert.h"
#include "hp/ops/ops.h"
#include "models/tiny_models.h"

namespace hp::models {
namespace {

using testing::random_ids;
using testing::tiny_config;

// The f32 model's parameters rounded to bf16, in a model built with dtype bf16.
std::shared_ptr<CausalLM> bf16_copy(const CausalLM& f32, ModelConfig c) {
  c.dtype = DType::bf16;
  std::shared_ptr<CausalLM> m;
  {
    nn::SkipInitGuard skip;
    m = build_model(c);
  }
  const auto src = f32.named_parameters(), dst = m->named_parameters();
  EXPECT_EQ(src.size(), dst.size());
  for (size_t i = 0; i < src.size() && i < dst.size(); ++i) {
    EXPECT_EQ(dst[i].first, src[i].first);
    EXPECT_EQ(dst[i].second.dtype(), DType::bf16) << dst[i].first;
    dst[i].second.copy_from(src[i].second.to(DType::bf16));
  }
  return m;
}

void expect_bf16_close(const std::string& type, bool mx) {
  manual_seed(21);
  const ModelConfig c = tiny_config(type, 64, 2);
  auto f32 = build_model(c);
  const Tensor ids = random_ids(2, 40, c.vocab_size);
  const double want = f32->loss(ids).item();
  auto m = bf16_copy(*f32, c);
  if (mx) mx::convert_to_mx(*m, {});
  Tensor loss = m->loss(ids);
  const double got = loss.item();
  std::printf("%s%s: loss f32 %.6f bf16 %.6f (rel %.2e)\n", type.c_str(), mx ? " mx" : "", want,
              got, std::abs(got - want) / want);
  EXPECT_LT(std::abs(got - want) / want, 0.01) << type;
  loss.backward();
  for (const auto& [name, p] : m->named_parameters()) {
    const Tensor g = p.grad();
    ASSERT_TRUE(g.defined()) << type << ": " << name;
    EXPECT_EQ(g.dtype(), DType::bf16) << type << ": " << name;
    const double s = sum(abs(g.to(DType::f32))).item();
    EXPECT_TRUE(std::isfinite(s)) << type << ": " << name;
    EXPECT_GT(s, 0.0) << type << ": " << name;
  }
}

TEST(Bf16, LlamaForwardLossBackward) {
  expect_bf16_close("llama", false);
}
TEST(Bf16, Qwen3ForwardLossBackward) {
  expect_bf16_close("qwen3", false);
}
TEST(Bf16, Qwen3MoeForwardLossBackward) {
  expect_bf16_close("qwen3_moe", false);
}
// Low precision over bf16 compute: MX linears and grouped MX experts take bf16 activations.
TEST(Bf16, Qwen3MoeWithMxForwardLossBackward) {
  expect_bf16_close("qwen3_moe", true);
}

}  // namespace
}  // namespace hp::models
