// convert_to_mx: which modules it converts, that they keep their parameters, and what they compute.
#include "hp/mx/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/models/moe.h"
#include "hp/models/hf/registry.h"
#include "hp/mx/linear.h"
#include "hp/ops/ops.h"
#include "models/compare.h"
#include "models/tiny_models.h"

namespace hp::mx {
namespace {

using models::testing::max_abs_diff;
using models::testing::random_ids;
using models::testing::tiny_config;

std::vector<std::string> kernel_linears(nn::Module& root) {
  std::vector<std::string> out;
  for (auto& [fqn, m] : root.named_modules())
    if (auto* lin = dynamic_cast<nn::Linear*>(m); lin && lin->has_kernel()) out.push_back(fqn);
  return out;
}

TEST(Convert, GlobsSelectLinearsInModelOrder) {
  manual_seed(1);
  auto model = models::build_model(tiny_config("qwen3"));
  const auto before = model->named_parameters();
  const std::vector<std::string> got = convert_to_mx(*model, {{}, {"*.mlp.*"}, {"*down_proj"}});
  const std::vector<std::string> want = {
      "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.1.mlp.gate_proj",
      "model.layers.1.mlp.up_proj"};
  EXPECT_EQ(got, want);
  EXPECT_EQ(kernel_linears(*model), want);
  // The very same parameter objects, in the same order: optimizers and checkpoints see no change.
  const auto after = model->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_TRUE(after[i].second.same(before[i].second)) << after[i].first;
  }
}

TEST(Convert, ConvertedLinearRunsMxLinearOnItsOwnParameters) {
  manual_seed(2);
  auto model = models::build_model(tiny_config("qwen3"));
  convert_to_mx(*model, {{ElemFormat::e4m3, ScaleMode::floor}, {"*.mlp.*"}, {"*down_proj"}});
  const auto& mlp = static_cast<models::GatedMLP&>(*model->model->layers[1]->mlp);
  const Tensor x = randn({3, 5, 64});
  const Tensor y = mlp.up_proj->forward(x);
  const Tensor want =
      mx_linear(x, mlp.up_proj->weight, Tensor(), {ElemFormat::e4m3, ScaleMode::floor});
  EXPECT_EQ(max_abs_diff(y, want), 0.0);
  EXPECT_GT(max_abs_diff(y, linear(x, mlp.up_proj->weight)), 0.0);  // really not the f32 GEMM
  // down_proj was excluded: the plain GEMM.
  const Tensor h = randn({4, 128});
  EXPECT_EQ(max_abs_diff(mlp.down_proj->forward(h), linear(h, mlp.down_proj->weight)), 0.0);

  // Gradients reach the module's parameter objects (what an optimizer built earlier holds).
  model->loss(random_ids(2, 12, 96)).backward();
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(std::isfinite(sum(abs(p.grad())).item())) << name;
  }
  EXPECT_GT(sum(abs(mlp.up_proj->weight.grad())).item(), 0.0);
  EXPECT_GT(sum(abs(mlp.gate_proj->weight.grad())).item(), 0.0);
}

TEST(Convert, LossStaysCloseToF32) {
  manual_seed(3);
  auto model = models::build_model(tiny_config("llama"));
  const Tensor ids = random_ids(2, 16, 96);
  const double f32 = model->loss(ids).item();
  const auto fqns = convert_to_mx(*model, {});  // every Linear, lm_head included
  EXPECT_EQ(fqns.size(), 2u * 7u + 1u);
  EXPECT_EQ(fqns.back(), "lm_head");
  const double mx = model->loss(ids).item();
  std::printf("loss f32 %.6f mx %.6f (rel %.2e)\n", f32, mx, std::abs(mx - f32) / f32);
  EXPECT_NE(mx, f32);
  EXPECT_LT(std::abs(mx - f32) / f32, 0.05);
}

TEST(Convert, MoEExpertSetsRunGroupedMx) {
  manual_seed(4);
  auto model = models::build_model(tiny_config("qwen3_moe"));
  const Tensor ids = random_ids(2, 16, 96);
  const double f32 = model->loss(ids).item();
  const auto fqns = convert_to_mx(*model, {{}, {"*.mlp"}, {}});
  EXPECT_EQ(fqns,
            (std::vector<std::string>{"model.layers.0.mlp.experts", "model.layers.1.mlp.experts"}));
  auto& block = static_cast<models::MoEBlock&>(*model->model->layers[0]->mlp);
  EXPECT_TRUE(block.has_grouped_kernel());
  EXPECT_TRUE(kernel_linears(*model).empty());
  Tensor loss = model->loss(ids);
  const double mx = loss.item();
  std::printf("moe loss f32 %.6f mx %.6f (rel %.2e)\n", f32, mx, std::abs(mx - f32) / f32);
  EXPECT_NE(mx, f32);
  EXPECT_LT(std::abs(mx - f32) / f32, 0.05);
  loss.backward();
  // Through the per-forward stack, every expert's own weights get a gradient (32 tokens, top-2 of
  // 4 experts: each expert is chosen), as does the router.
  for (const auto& e : block.experts)
    for (const auto* lin : {e->gate_proj.get(), e->up_proj.get(), e->down_proj.get()}) {
      ASSERT_TRUE(lin->weight.grad().defined());
      EXPECT_GT(sum(abs(lin->weight.grad())).item(), 0.0);
    }
  EXPECT_GT(sum(abs(block.gate->weight.grad())).item(), 0.0);

  // With "*", expert Linears are not converted one by one (the block never calls them).
  auto again = models::build_model(tiny_config("qwen3_moe"));
  const auto all = convert_to_mx(*again, {});
  for (const auto& f : all) EXPECT_EQ(f.find(".experts."), std::string::npos) << f;
  EXPECT_EQ(all.size(), 2u * (4u + 1u) + 1u);  // per layer q/k/v/o + experts; lm_head
}

TEST(Convert, GlobMatchingNothingIsAnErrorAndChangesNothing) {
  auto model = models::build_model(tiny_config("qwen3_moe"));
  try {
    convert_to_mx(*model, {{}, {"*.self_attn.*", "*.mlp.experts.0.up_proj"}, {}});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[mx]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'*.mlp.experts.0.up_proj'"), std::string::npos) << msg;
  }
  EXPECT_TRUE(kernel_linears(*model).empty());
  EXPECT_THROW(convert_to_mx(*model, {{}, {"*nope*"}, {}}), ValueError);
  // A glob whose matches are all excluded did match: no error, nothing converted.
  EXPECT_TRUE(convert_to_mx(*model, {{}, {"lm_head"}, {"lm_*"}}).empty());
}

}  // namespace
}  // namespace hp::mx
