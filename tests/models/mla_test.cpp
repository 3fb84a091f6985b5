// DeepSeek-V3 multi-head latent attention against transformers (fixtures from
// tools/make_moe_fixtures.py): forward, input gradient and parameter gradients, with and without
// q_lora_rank, with v_head_dim below (padded v) and above (padded q/k) the qk head dim.
#include "hp/models/mla.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "hp/io/safetensors.h"
#include "models/compare.h"
#include "hp/ops/ops.h"

namespace hp::models {
namespace {

using testing::load_fixture;
using testing::max_abs_diff;
using testing::rel_diff;



struct Layer : nn::Module {
  explicit Layer(const MLAOptions& o) {
    attn = register_module("self_attn", std::make_shared<MLAttention>(o));
  }
  std::shared_ptr<MLAttention> attn;
};

// The tiny configs of tools/make_moe_fixtures.py.
MLAOptions tiny(int64_t q_lora_rank, int64_t v_head_dim) {
  MLAOptions o;
  o.hidden_size = 32;
  o.num_heads = 4;
  o.q_lora_rank = q_lora_rank;
  o.kv_lora_rank = 16;
  o.qk_nope_head_dim = 8;
  o.qk_rope_head_dim = 4;
  o.v_head_dim = v_head_dim;
  return o;
}

void check_parity(const MLAOptions& o, const std::string& file) {
  auto fx = load_fixture("moe/" + file);
  Layer layer(o);
  size_t n_weights = 0;
  for (const auto& [k, v] : fx) n_weights += k.rfind("self_attn.", 0) == 0;
  auto params = layer.named_parameters();
  EXPECT_EQ(params.size(), n_weights);
  for (const auto& [fqn, p] : params) {
    ASSERT_TRUE(fx.count(fqn)) << "fixture lacks " << fqn;
    p.copy_from(fx.at(fqn));
  }
  Tensor x = fx.at("input").clone();
  x.requires_grad_();
  auto [cos, sin] = rope_cos_sin(x.size(1), o.qk_rope_head_dim, 10000.0);
  Tensor y = layer.attn->forward(x, cos, sin);
  EXPECT_LE(max_abs_diff(y, fx.at("output")), 1e-4);
  sum(y * fx.at("grad_output")).backward();
  EXPECT_LE(rel_diff(x.grad(), fx.at("grad.input")), 1e-3);
  int checked = 0;
  for (const auto& [k, v] : fx) {
    if (k.rfind("grad.self_attn.", 0) != 0) continue;
    const Tensor g = layer.parameter(k.substr(5)).grad();
    ASSERT_TRUE(g.defined()) << k;
    EXPECT_LE(rel_diff(g, v), 1e-3) << k;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(MLA, DeepseekV3MatchesTransformers) {
  check_parity(tiny(24, 6), "deepseek_v3_mla.safetensors");
}

TEST(MLA, WithoutQLoraAndWideValuesMatchesTransformers) {
  check_parity(tiny(0, 16), "deepseek_v3_noqlora_mla.safetensors");
}

TEST(MLA, SoftmaxScaleWithYarnMscale) {
  EXPECT_DOUBLE_EQ(mla_softmax_scale(192), 1.0 / std::sqrt(192.0));
  // DeepSeek-V3: yarn factor 40, mscale_all_dim 1 → (0.1·ln 40 + 1)² / sqrt(192).
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(mla_softmax_scale(192, 40.0, 1.0), m * m / std::sqrt(192.0), 1e-15);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(1.0, 1.0), 1.0);
}

TEST(MLA, RejectsBadShapes) {
  MLAttention attn(tiny(0, 6));
  auto [cos, sin] = rope_cos_sin(5, 4);
  EXPECT_THROW(attn.forward(zeros({2, 5, 31}), cos, sin), ValueError);
  EXPECT_THROW(attn.forward(zeros({2, 6, 32}), cos, sin), ValueError);
  MLAOptions odd = tiny(0, 6);
  odd.qk_rope_head_dim = 3;
  EXPECT_THROW(MLAttention{odd}, ValueError);
}

}  // namespace
}  // namespace hp::models
