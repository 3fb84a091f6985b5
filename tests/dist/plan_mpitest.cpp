// Sharding plans: modules sharded by a plan equal the one-rank modules in forward and in every
// gradient (gathered to full), and bad plans fail with the same clear error on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "error_of.h"
#include "hp/autograd/grad_mode.h"
#include "hp/models/hf/registry.h"
#include "hp/models/tp_plan.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"
#include "hp/shard/plan.h"

namespace hp::shard {
namespace {

// Within 1e-5, relative above magnitude 1 (f32 sums in a different order across ranks).
void expect_near(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto av = a.to_vector(), bv = b.to_vector();
  for (size_t i = 0; i < av.size(); ++i)
    ASSERT_NEAR(av[i], bv[i], 1e-5 * std::max(1.0, std::abs(bv[i]))) << what << " [" << i << "]";
}

// Every parameter gradient of `tp` (gathered to full through its plan entry) equals `ref`'s.
void expect_grads_equal(const nn::Module& ref, const nn::Module& tp, const ShardedParameters& sp) {
  auto rp = ref.named_parameters(), tpp = tp.named_parameters();
  ASSERT_EQ(rp.size(), tpp.size());
  for (size_t i = 0; i < rp.size(); ++i) {
    const auto& [name, t] = tpp[i];
    ASSERT_EQ(rp[i].first, name);
    ASSERT_TRUE(t.grad().defined()) << name;
    Tensor g = t.grad();
    if (sp.contains(name)) {
      const DTensor& d = sp.at(name);
      EXPECT_TRUE(d.local().same(t)) << name << ": the plan entry is the module's tensor";
      g = DTensor::from_local(g, d.mesh(), d.placements(), d.global_shape()).full_tensor();
    }
    expect_near(g, rp[i].second.grad(), "grad " + name);
  }
}

models::ModelConfig small_config(int64_t heads, int64_t kv_heads) {
  models::ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 16;
  c.intermediate_size = 10;  // uneven over 3 and 4 ranks (torch.chunk: 4,4,2 / 3,3,3,1)
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 2;
  c.initializer_range = 0.3;
  c.attention_bias = true;
  return c;
}

TEST(ShardPlan, GlobMatch) {
  EXPECT_TRUE(glob_match("*.mlp.*_proj", "layers.0.mlp.up_proj"));
  EXPECT_TRUE(glob_match("*mlp.up_proj", "mlp.up_proj"));
  EXPECT_TRUE(glob_match("layers.*.q_proj", "layers.12.self_attn.q_proj"));
  EXPECT_FALSE(glob_match("*.up_proj", "mlp.up_proj.x"));
  EXPECT_FALSE(glob_match("up_proj", "mlp.up_proj"));
  EXPECT_TRUE(glob_match("", ""));
}

// SwiGLU MLP with biases: gate/up colwise, down rowwise, intermediate 10 uneven over 3, 4 ranks.
TEST(ShardPlan, TensorParallelMlpMatchesOneRank) {
  auto mesh = make_mesh({{"tp", -1}});
  auto c = small_config(4, 4);
  manual_seed(11);
  models::GatedMLP ref(c, c.intermediate_size, true);
  manual_seed(11);
  models::GatedMLP tp(c, c.intermediate_size, true);
  Tensor x = randn({2, 3, 16}), target = randn({2, 3, 16});
  ShardedParameters sp = parallelize_module(tp, mesh, "tp",
                                            {{"gate_proj", std::make_shared<ColwiseParallel>()},
                                             {"up_proj", std::make_shared<ColwiseParallel>()},
                                             {"down_proj", std::make_shared<RowwiseParallel>()}});
  const auto r = chunk_range(10, mesh->size(0), mesh->coordinate(0));
  EXPECT_EQ(tp.gate_proj->weight.shape(), (Shape{r.length, 16}));
  EXPECT_EQ(tp.down_proj->weight.shape(), (Shape{16, r.length}));
  EXPECT_EQ(sp.at("down_proj.weight").global_shape(), (Shape{16, 10}));
  EXPECT_EQ(sp.at("down_proj.weight").placements(), (Placements{Shard{1}}));
  EXPECT_EQ(sp.at("down_proj.bias").placements(), (Placements{Replicate{}}));
  EXPECT_EQ(sp.at("up_proj.bias").placements(), (Placements{Shard{0}}));

  Tensor xr = x.clone().requires_grad_(), xt = x.clone().requires_grad_();
  Tensor yr = ref.forward(xr), yt = tp.forward(xt);
  sum(yr * target).backward();
  sum(yt * target).backward();
  expect_near(yt.detach(), yr.detach(), "forward");
  expect_near(xt.grad(), xr.grad(), "dx");
  expect_grads_equal(ref, tp, sp);
}

// A whole decoder layer (GQA attention with q/k/v/o bias + MLP) under llama_tp_plan; Qwen3 adds
// per-head q/k norms whose weight gradients are all-reduced. With sequence_parallel the layer
// sees this rank's torch.chunk rows of T (10: uneven over 3 and 4 ranks), MLP biases on so the
// rowwise bias on local rows is covered, and non-trivial layer norm weights.
void check_decoder_layer(const std::string& model_type, bool sequence_parallel = false) {
  auto mesh = make_mesh({{"tp", -1}});
  auto c = small_config(24, 12);  // heads and kv heads divide by 1..4 ranks
  c.model_type = model_type;
  c.mlp_bias = sequence_parallel;
  auto factory = model_type == "qwen3" ? models::qwen3_layers() : models::llama_layers();
  manual_seed(5);
  models::DecoderLayer ref(c, factory, 0);
  manual_seed(5);
  models::DecoderLayer tp(c, factory, 0);
  if (model_type == "qwen3") {
    // Non-trivial norm weights so their gradients differ per head.
    auto* attn = static_cast<models::Attention*>(ref.self_attn.get());
    auto* attn_tp = static_cast<models::Attention*>(tp.self_attn.get());
    Tensor w = rand({2}, DType::f32, 0.5, 1.5);
    autograd::NoGradGuard ng;
    attn->q_norm->weight.copy_from(w);
    attn_tp->q_norm->weight.copy_from(w);
  }
  if (sequence_parallel) {
    autograd::NoGradGuard ng;
    for (auto norms : {std::make_pair(ref.input_layernorm, tp.input_layernorm),
                       std::make_pair(ref.post_attention_layernorm, tp.post_attention_layernorm)}) {
      Tensor w = rand({16}, DType::f32, 0.5, 1.5);
      norms.first->weight.copy_from(w);
      norms.second->weight.copy_from(w);
    }
  }
  ShardedParameters sp =
      parallelize_module(tp, mesh, "tp", models::llama_tp_plan(c, sequence_parallel));
  EXPECT_EQ(sp.at("self_attn.k_proj.weight").local().size(0), 12 / mesh->size(0) * 2);
  if (sequence_parallel) {
    EXPECT_EQ(sp.at("input_layernorm.weight").placements(), (Placements{Replicate{}}));
    EXPECT_TRUE(tp.post_attention_layernorm->has_forward_wrapper());
  }

  const int64_t T = sequence_parallel ? 10 : 5;
  Tensor x = randn({2, T, 16}), target = randn({2, T, 16});
  // With sequence parallelism the loss is per token (target / (B·T)), keeping gradients O(1)
  // for the tolerance (which is absolute below magnitude 1): 2x the tokens and non-unit norm
  // weights otherwise give gradients up to ~40 whose f32 reduction-order differences reach
  // 1e-5 absolute on elements near zero.
  if (sequence_parallel) target = mul(target, 1.0 / static_cast<double>(2 * T));
  models::RotaryTables rope(c, c.head_dim);
  models::AttentionContext ctx_r, ctx_t;
  ctx_r.rope = ctx_t.rope = &rope;
  // This rank's rows of a [B, T, ...] tensor (all of them without sequence parallelism).
  const auto r =
      sequence_parallel ? chunk_range(T, mesh->size(0), mesh->coordinate(0)) : ChunkRange{0, T};
  auto rows = [&](const Tensor& a) { return narrow(a, 1, r.start, r.length).contiguous(); };
  Tensor xr = x.clone().requires_grad_(), xt = rows(x).requires_grad_();
  Tensor yr = ref.forward(xr, ctx_r), yt = tp.forward(xt, ctx_t);
  ASSERT_EQ(yt.shape(), (Shape{2, r.length, 16}));
  sum(yr * target).backward();
  sum(yt * rows(target)).backward();
  expect_near(yt.detach(), rows(yr.detach()), "forward");
  expect_near(xt.grad(), rows(xr.grad()), "dx");
  if (sequence_parallel) {
    // The gathered forward output and input gradient are the one-rank ones.
    const Placements seq{Shard{1}};
    expect_near(DTensor::from_local(yt.detach(), mesh, seq, {2, T, 16}).full_tensor(), yr.detach(),
                "gathered forward");
    expect_near(DTensor::from_local(xt.grad(), mesh, seq, {2, T, 16}).full_tensor(), xr.grad(),
                "gathered dx");
  }
  expect_grads_equal(ref, tp, sp);
}

TEST(ShardPlan, LlamaDecoderLayerMatchesOneRank) {
  check_decoder_layer("llama");
}
TEST(ShardPlan, Qwen3DecoderLayerMatchesOneRank) {
  check_decoder_layer("qwen3");
}
TEST(ShardPlan, SequenceParallelLlamaDecoderLayerMatchesOneRank) {
  check_decoder_layer("llama", true);
}
TEST(ShardPlan, SequenceParallelQwen3DecoderLayerMatchesOneRank) {
  check_decoder_layer("qwen3", true);
}

// Rowwise with output Shard(1) / colwise with input Shard(1) directly on an MLP with biases:
// T = 7 over 1..4 ranks (torch.chunk: 4,3 / 3,3,1 / 2,2,2,1).
TEST(ShardPlan, SequenceParallelMlpMatchesOneRank) {
  auto mesh = make_mesh({{"tp", -1}});
  auto c = small_config(4, 4);
  manual_seed(13);
  models::GatedMLP ref(c, c.intermediate_size, true);
  manual_seed(13);
  models::GatedMLP tp(c, c.intermediate_size, true);
  auto col = std::make_shared<ColwiseParallel>(0, Shard{1});
  ShardedParameters sp =
      parallelize_module(tp, mesh, "tp",
                         {{"gate_proj", col},
                          {"up_proj", col},
                          {"down_proj", std::make_shared<RowwiseParallel>(0, Shard{1})}});
  const int64_t T = 7;
  Tensor x = randn({2, T, 16}), target = randn({2, T, 16});
  const auto r = chunk_range(T, mesh->size(0), mesh->coordinate(0));
  auto rows = [&](const Tensor& a) { return narrow(a, 1, r.start, r.length).contiguous(); };
  Tensor xr = x.clone().requires_grad_(), xt = rows(x).requires_grad_();
  Tensor yr = ref.forward(xr), yt = tp.forward(xt);
  sum(yr * target).backward();
  sum(yt * rows(target)).backward();
  expect_near(yt.detach(), rows(yr.detach()), "forward");
  expect_near(xt.grad(), rows(xr.grad()), "dx");
  expect_grads_equal(ref, tp, sp);
}

// Sequence parallel norm: each rank normalizes its rows; the weight gradient sums over ranks.
TEST(ShardPlan, SequenceParallelNormMatchesOneRank) {
  auto mesh = make_mesh({{"tp", -1}});
  nn::RMSNorm ref(8), tp(8);
  Tensor w = rand({8}, DType::f32, 0.5, 1.5);
  {
    autograd::NoGradGuard ng;
    ref.weight.copy_from(w);
    tp.weight.copy_from(w);
  }
  ShardedParameters sp =
      parallelize_module(tp, mesh, "tp", {{"", std::make_shared<SequenceParallel>()}});
  Tensor x = randn({2, 7, 8}), target = randn({2, 7, 8});
  Tensor xr = x.clone().requires_grad_();
  sum(ref.forward(xr) * target).backward();
  const auto r = chunk_range(7, mesh->size(0), mesh->coordinate(0));
  Tensor xt = narrow(x, 1, r.start, r.length).contiguous().requires_grad_();
  Tensor yt = tp.forward(xt);
  sum(yt * narrow(target, 1, r.start, r.length)).backward();
  expect_near(yt.detach(), narrow(ref.forward(x), 1, r.start, r.length).contiguous().detach(),
              "forward");
  expect_near(xt.grad(), narrow(xr.grad(), 1, r.start, r.length).contiguous(), "dx");
  expect_near(tp.weight.grad(), ref.weight.grad(), "dweight");
  EXPECT_EQ(sp.at("weight").placements(), (Placements{Replicate{}}));
}

using hp::testing::error_of;

TEST(ShardPlan, BadPlansFailOnEveryRank) {
  auto mesh = make_mesh({{"tp", -1}});
  const int64_t tp = mesh->size(0);
  auto c = small_config(4, 4);
  models::GatedMLP mlp(c, 10, false);
  Tensor before = mlp.gate_proj->weight;
  std::string e = error_of([&] {
    parallelize_module(mlp, mesh, "tp",
                       {{"gate_proj", std::make_shared<ColwiseParallel>()},
                        {"*.nothing", std::make_shared<RowwiseParallel>()}});
  });
  EXPECT_NE(e.find("[shard]"), std::string::npos) << e;
  EXPECT_NE(e.find("'*.nothing'"), std::string::npos) << e;
  EXPECT_NE(e.find("matches no module"), std::string::npos) << e;
  EXPECT_TRUE(mlp.gate_proj->weight.same(before)) << "a failed plan leaves the module untouched";
  EXPECT_FALSE(mlp.gate_proj->has_forward_wrapper());

  e = error_of([&] {
    parallelize_module(mlp, mesh, "tp", {{"*", std::make_shared<ColwiseParallel>()}});
  });
  EXPECT_NE(e.find("applies to nn::Linear"), std::string::npos) << e;

  e = error_of([&] {
    parallelize_module(mlp, mesh, "tp",
                       {{"down_proj", std::make_shared<RowwiseParallel>(0, Partial{})}});
  });
  EXPECT_NE(e.find("output layout must be Replicate or Shard"), std::string::npos) << e;

  e = error_of([&] {
    parallelize_module(mlp, mesh, "tp",
                       {{"*_proj", std::make_shared<ColwiseParallel>()},
                        {"up_proj", std::make_shared<ColwiseParallel>()}});
  });
  EXPECT_NE(e.find("matches both"), std::string::npos) << e;

  if (tp > 1) {
    // tp + 1 heads never divide by tp.
    auto bad = small_config(tp + 1, tp + 1);
    models::DecoderLayer layer(bad, models::llama_layers(), 0);
    e = error_of([&] { parallelize_module(layer, mesh, "tp", models::llama_tp_plan(bad)); });
    EXPECT_NE(e.find("self_attn.q_proj"), std::string::npos) << e;
    EXPECT_NE(e.find(std::to_string(tp + 1) + " attention heads"), std::string::npos) << e;
    EXPECT_NE(e.find("tp degree " + std::to_string(tp)), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace hp::shard
