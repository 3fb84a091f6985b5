// Low precision under tensor parallelism: an MX-converted MLP sharded by a plan (in either order
// of application) equals the one-rank MX MLP. Shard sizes are multiples of the MX block (32), so
// every quantization block is the one-rank block and only f32 summation order differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "hp/models/transformer.h"
#include "hp/mx/convert.h"
#include "hp/ops/ops.h"
#include "hp/shard/plan.h"

namespace hp::shard {
namespace {

struct MlpRun {
  Tensor y, dx;
  std::vector<Tensor> grads;  // full (gathered) parameter gradients, in parameter order
};

MlpRun run(models::GatedMLP& mlp, const ShardedParameters* sp, const Tensor& x0,
           const Tensor& target) {
  Tensor x = x0.clone().requires_grad_();
  MlpRun r;
  r.y = mlp.forward(x);
  sum(r.y * target).backward();
  r.dx = x.grad();
  for (const auto& [name, t] : mlp.named_parameters()) {
    Tensor g = t.grad();
    if (sp && sp->contains(name)) {
      const DTensor& d = sp->at(name);
      g = DTensor::from_local(g, d.mesh(), d.placements(), d.global_shape()).full_tensor();
    }
    r.grads.push_back(g);
  }
  return r;
}

// Within 1e-5 of the larger of 1 and the reference's largest magnitude.
void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto av = a.to_vector(), bv = b.to_vector();
  double scale = 1.0;
  for (double v : bv) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < av.size(); ++i)
    ASSERT_NEAR(av[i], bv[i], 1e-5 * scale) << what << " [" << i << "]";
}

TEST(MxPlan, MxMlpUnderTensorParallelMatchesOneRank) {
  auto mesh = make_mesh({{"tp", -1}});
  models::ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 384;  // 384 / {1,2,3,4} ranks: 384, 192, 128, 96 — whole MX blocks
  c.initializer_range = 0.3;
  const ShardingPlan plan{{"gate_proj", std::make_shared<ColwiseParallel>()},
                          {"up_proj", std::make_shared<ColwiseParallel>()},
                          {"down_proj", std::make_shared<RowwiseParallel>()}};
  manual_seed(3);
  const Tensor x = randn({2, 16, 64}), target = randn({2, 16, 64});
  auto make = [&] {
    manual_seed(9);
    return std::make_unique<models::GatedMLP>(c, c.intermediate_size, true);
  };
  auto ref = make();
  mx::convert_to_mx(*ref, {});
  const MlpRun want = run(*ref, nullptr, x, target);
  auto plain = make();
  const MlpRun f32 = run(*plain, nullptr, x, target);

  for (bool convert_first : {true, false}) {
    auto tp = make();
    if (convert_first) mx::convert_to_mx(*tp, {});
    const ShardedParameters sp = parallelize_module(*tp, mesh, "tp", plan);
    if (!convert_first) mx::convert_to_mx(*tp, {});
    const MlpRun got = run(*tp, &sp, x, target);
    const std::string order = convert_first ? "convert, then plan: " : "plan, then convert: ";
    expect_close(got.y, want.y, order + "forward");
    expect_close(got.dx, want.dx, order + "dx");
    for (size_t i = 0; i < want.grads.size(); ++i)
      expect_close(got.grads[i], want.grads[i], order + "grad " + std::to_string(i));
  }
  // The MX result is not the f32 one (the plan's rowwise GEMM did go through the kernel).
  double diff = 0;
  const auto a = want.y.to_vector(), b = f32.y.to_vector();
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace hp::shard
