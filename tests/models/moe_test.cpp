// MoE blocks against transformers (fixtures from tools/make_moe_fixtures.py), grouped experts
// against a per-token reference, thread-count determinism, and option validation.
#include "hp/models/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/io/safetensors.h"
#include "models/compare.h"
#include "hp/ops/ops.h"

namespace hp::models {
namespace {

using testing::load_fixture;
using testing::max_abs_diff;
using testing::rel_diff;


bool is_weight_key(const std::string& k) {
  return k.find('.') != std::string::npos && k.rfind("grad.", 0) != 0;
}


// A decoder layer's view of the block: registered under the checkpoint prefix.
struct Layer : nn::Module {
  Layer(const MoEOptions& o, const std::string& prefix) {
    block = register_module(prefix, std::make_shared<MoEBlock>(o));
  }
  std::shared_ptr<MoEBlock> block;
};

// Loads every parameter by FQN; the fixture must hold exactly the layer's parameters.
void load_weights(const Layer& layer, const std::map<std::string, Tensor>& fx) {
  size_t n_weights = 0;
  for (const auto& [k, v] : fx) n_weights += is_weight_key(k);
  auto params = layer.named_parameters();
  EXPECT_EQ(params.size(), n_weights);
  for (const auto& [fqn, p] : params) {
    auto it = fx.find(fqn);
    ASSERT_NE(it, fx.end()) << "fixture lacks " << fqn;
    ASSERT_EQ(it->second.shape(), p.shape()) << fqn;
    p.copy_from(it->second);
  }
}

void check_parity(const MoEOptions& o, const std::string& prefix, const std::string& file) {
  auto fx = load_fixture("moe/" + file);
  Layer layer(o, prefix);
  load_weights(layer, fx);
  Tensor x = fx.at("input").clone();
  x.requires_grad_();
  MoEOutput r = layer.block->forward_with_router(x);
  EXPECT_LE(max_abs_diff(r.output, fx.at("output")), 1e-4);
  EXPECT_LE(max_abs_diff(r.router_logits, fx.at("router_logits")), 1e-5);
  sum(r.output * fx.at("grad_output")).backward();
  EXPECT_LE(rel_diff(x.grad(), fx.at("grad.input")), 1e-3);
  int checked = 0;
  for (const auto& [k, v] : fx) {
    if (k.rfind("grad.", 0) != 0 || k == "grad.input") continue;
    const Tensor g = layer.parameter(k.substr(5)).grad();
    ASSERT_TRUE(g.defined()) << k;
    EXPECT_LE(rel_diff(g, v), 1e-3) << k;
    ++checked;
  }
  EXPECT_GE(checked, 3);
  if (fx.count("aux_loss")) {
    Tensor aux = load_balancing_loss({r.router_logits, r.router_logits}, o.num_experts, o.top_k);
    EXPECT_NEAR(aux.item(), fx.at("aux_loss").item(), 1e-5);
  }
}

TEST(MoE, Qwen3MoeMatchesTransformers) {
  check_parity(MoEOptions::qwen3_moe(32, 16, 8, 2, true), "mlp", "qwen3_moe_moe.safetensors");
}

TEST(MoE, MixtralMatchesTransformers) {
  check_parity(MoEOptions::mixtral(32, 48, 4, 2), "block_sparse_moe", "mixtral_moe.safetensors");
}

TEST(MoE, DeepseekV3MatchesTransformers) {
  check_parity(MoEOptions::deepseek_v3(32, 16, 8, 2, 2, 1, true, 2.5, 1), "mlp",
               "deepseek_v3_moe.safetensors");
}

TEST(MoE, DeepseekBiasSteersSelectionOnly) {
  manual_seed(3);
  MoEBlock block(MoEOptions::deepseek_v3(16, 8, 4, 1, 2, 1, false, 1.0, 0));
  Tensor x = randn({6, 16});
  const auto before = block.gate->route(x);
  // A large bias on expert 3 makes every token pick it, but the weight stays sigmoid(logit).
  block.gate->e_score_correction_bias.copy_from(from_vector({0, 0, 0, 10}, {4}));
  const auto after = block.gate->route(x);
  for (double id : after.indices.to_vector()) EXPECT_EQ(id, 3);
  const Tensor want = sigmoid(select(after.logits, 1, 3));
  EXPECT_LE(max_abs_diff(reshape(after.weights, {6}), want), 1e-6);
  EXPECT_FALSE(before.indices.to_vector() == after.indices.to_vector());
}

// The grouped Function equals a per-token composition of differentiable ops; limit > 0 adds the
// SwiGLU clamp (DeepSeek-V4), active for a good share of the entries at limit 1.
void check_grouped_experts(double limit) {
  manual_seed(7);
  const int64_t n = 9, h = 12, i = 5, e = 4, k = 2;
  std::vector<Tensor> g, u, d;
  for (int64_t q = 0; q < e; ++q) {
    g.push_back(randn({i, h}).requires_grad_());
    u.push_back(randn({i, h}).requires_grad_());
    d.push_back(randn({h, i}).requires_grad_());
  }
  Tensor x = randn({n, h}).requires_grad_();
  Tensor w = rand({n, k}).requires_grad_();
  // Expert 2 is never chosen: its gradients must be zero.
  std::vector<double> ids{0, 1, 1, 3, 3, 0, 0, 1, 1, 3, 3, 0, 0, 3, 1, 0, 3, 1};
  Tensor idx = from_vector(ids, {n, k}, DType::i64);
  Tensor gout = randn({n, h});
  Tensor y = grouped_experts(x, w, idx, g, u, d, limit);
  sum(y * gout).backward();
  std::vector<Tensor> grads{x.grad(), w.grad(), g[0].grad(), u[3].grad(), d[1].grad()};
  for (const Tensor& t : {x, w, g[0], u[3], d[1]}) t.zero_grad();
  std::vector<Tensor> rows;
  for (int64_t t = 0; t < n; ++t) {
    Tensor acc = zeros({h});
    for (int64_t j = 0; j < k; ++j) {
      const auto q = static_cast<size_t>(ids[t * k + j]);
      Tensor xt = select(x, 0, t);
      Tensor gate = linear(xt, g[q]), up = linear(xt, u[q]);
      if (limit > 0) {
        gate = clamp(gate, -std::numeric_limits<double>::infinity(), limit);
        up = clamp(up, -limit, limit);
      }
      Tensor hid = silu(gate) * up;
      acc = acc + linear(hid, d[q]) * select(select(w, 0, t), 0, j);
    }
    rows.push_back(acc);
  }
  Tensor ref = stack(rows, 0);
  EXPECT_LE(max_abs_diff(y, ref), 1e-4);
  sum(ref * gout).backward();
  std::vector<Tensor> ref_grads{x.grad(), w.grad(), g[0].grad(), u[3].grad(), d[1].grad()};
  for (size_t q = 0; q < grads.size(); ++q) EXPECT_LE(rel_diff(grads[q], ref_grads[q]), 1e-5) << q;
  for (double v : g[2].grad().to_vector()) EXPECT_EQ(v, 0.0);
}

TEST(MoE, GroupedExpertsMatchPerTokenReference) { check_grouped_experts(0.0); }

TEST(MoE, GroupedExpertsWithSwigluClampMatchPerTokenReference) { check_grouped_experts(1.0); }

std::vector<std::vector<double>> run_block(int threads) {
  set_num_threads(threads);
  manual_seed(11);
  MoEBlock block(MoEOptions::deepseek_v3(64, 32, 8, 2, 2, 1, true, 2.5, 1));
  Tensor x = randn({3, 37, 64}).requires_grad_();
  Tensor y = block.forward(x);
  sum(y * y).backward();
  std::vector<std::vector<double>> out{y.to_vector(), x.grad().to_vector()};
  for (const auto& [name, p] : block.named_parameters())
    if (p.grad().defined()) out.push_back(p.grad().to_vector());
  return out;
}

TEST(MoE, BitwiseIdenticalAcrossThreadCounts) {
  const int saved = num_threads();
  const auto one = run_block(1), two = run_block(2);
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t q = 0; q < one.size(); ++q) EXPECT_TRUE(one[q] == two[q]) << "tensor " << q;
}

// bf16 parameters and activations run through the f32 kernels and match an f32 block with the same
// (bf16-rounded) weights to bf16 precision; gradients reach the bf16 parameters in bf16.
TEST(MoE, Bf16BlockMatchesF32) {
  manual_seed(5);
  MoEOptions o = MoEOptions::qwen3_moe(16, 8, 4, 2, true);
  MoEBlock ref(o);
  o.dtype = DType::bf16;
  MoEBlock low(o);
  auto rp = ref.named_parameters(), lp = low.named_parameters();
  for (size_t q = 0; q < rp.size(); ++q) {
    lp[q].second.copy_from(rp[q].second);
    rp[q].second.copy_from(lp[q].second);
  }
  Tensor x = randn({5, 16}).to(DType::bf16);
  Tensor y_low = low.forward(x);
  EXPECT_EQ(y_low.dtype(), DType::bf16);
  EXPECT_LE(rel_diff(y_low, ref.forward(x.to(DType::f32))), 2e-2);
  sum(cast(y_low, DType::f32)).backward();
  int with_grad = 0;
  for (const auto& [name, p] : low.named_parameters()) {
    if (!p.grad().defined()) continue;
    EXPECT_EQ(p.grad().dtype(), DType::bf16) << name;
    ++with_grad;
  }
  EXPECT_GE(with_grad, 7);  // router + the three weights of each of >= 2 chosen experts
}

// Frozen experts get no gradient; the others still do.
TEST(MoE, FrozenExpertsGetNoGradient) {
  manual_seed(6);
  std::vector<Tensor> g, u, d;
  for (int q = 0; q < 3; ++q) {
    g.push_back(randn({4, 6}).requires_grad_(q != 1));
    u.push_back(randn({4, 6}).requires_grad_(q != 1));
    d.push_back(randn({6, 4}).requires_grad_(q != 1));
  }
  Tensor x = randn({4, 6});
  Tensor idx = from_vector({0, 1, 1, 2, 2, 0, 1, 0}, {4, 2}, DType::i64);
  sum(grouped_experts(x, ones({4, 2}), idx, g, u, d)).backward();
  EXPECT_FALSE(g[1].grad().defined());
  EXPECT_TRUE(g[0].grad().defined() && d[2].grad().defined());
}

TEST(MoE, FqnsFollowCheckpointNames) {
  MoEBlock mix(MoEOptions::mixtral(8, 16, 2, 1));
  std::vector<std::string> names;
  for (const auto& [n, p] : mix.named_parameters()) names.push_back(n);
  std::vector<std::string> want{"gate.weight",         "experts.0.w1.weight", "experts.0.w3.weight",
                                "experts.0.w2.weight", "experts.1.w1.weight", "experts.1.w3.weight",
                                "experts.1.w2.weight"};
  EXPECT_EQ(names, want);
  MoEBlock ds(MoEOptions::deepseek_v3(8, 4, 4, 2, 2, 1, true, 1.0, 2));
  EXPECT_NO_THROW(ds.parameter("gate.e_score_correction_bias"));
  EXPECT_EQ(ds.parameter("shared_experts.up_proj.weight").shape(), (Shape{8, 8}));
}

TEST(MoE, InvalidOptionsNameTheValue) {
  auto msg = [](const MoEOptions& o) {
    try {
      MoEBlock b(o);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_NE(msg(MoEOptions::qwen3_moe(8, 4, 4, 5, false)).find("num_experts_per_tok"),
            std::string::npos);
  EXPECT_NE(msg(MoEOptions::deepseek_v3(8, 4, 6, 2, 4, 1, true, 1.0, 0)).find("n_group = 4"),
            std::string::npos);
  EXPECT_NE(msg(MoEOptions::deepseek_v3(8, 4, 8, 5, 2, 1, true, 1.0, 0)).find("topk_group = 1"),
            std::string::npos);
}

}  // namespace
}  // namespace hp::models
