// Logits, loss and gradients of tiny HF checkpoints against transformers
// (tests/models/fixtures, made by tools/make_model_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "hp/io/safetensors.h"
#include "models/compare.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "hp/ops/ops.h"
#include "test_dir.h"

namespace hp::models {
namespace {

using testing::max_abs_diff;

std::string fixture(const std::string& name) {
  return std::string(HP_TEST_DIR) + "/fixtures/" + name;
}

Tensor load_ref(const io::SafetensorsFile& f, const std::string& name) {
  const auto& t = f.tensor(name);
  return from_blob(const_cast<std::byte*>(t.data), t.shape, t.dtype, nullptr).clone();
}


double rel_err(const Tensor& a, const Tensor& ref) {
  const auto x = a.to_vector(), y = ref.to_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, LogitsLossAndGradientsMatchTransformers) {
  const std::string dir = fixture(GetParam());
  auto model = load_model(dir);
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const Tensor ids = load_ref(ref, "input_ids");

  const Tensor logits = model->forward(ids);
  EXPECT_LE(max_abs_diff(logits, load_ref(ref, "logits")), 1e-4) << GetParam();

  const Tensor loss = model->loss(ids);
  EXPECT_NEAR(loss.item(), load_ref(ref, "loss").item(), 1e-5);
  loss.backward();
  int checked = 0;
  for (const auto& t : ref.tensors()) {
    if (t.name.rfind("grad.", 0) != 0) continue;
    const std::string fqn = t.name.substr(5);
    const Tensor g = model->parameter(fqn).grad();
    ASSERT_TRUE(g.defined()) << fqn;
    EXPECT_LE(rel_err(g, load_ref(ref, t.name)), 1e-3) << GetParam() << " " << fqn;
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity,
                         ::testing::Values("llama", "llama_tied", "llama_rope_llama3",
                                           "llama_rope_yarn", "llama_rope_linear",
                                           "llama_rope_dynamic", "qwen2", "qwen3", "qwen3_moe",
                                           "mixtral", "deepseek_v3", "deepseek_v3_yarn",
                                           "mistral", "qwen2_sliding", "qwen3_sliding"));

class Checkpoint : public ::testing::TestWithParam<std::string> {};

// Every parameter hp builds is a checkpoint tensor and vice versa (DeepSeek's
// e_score_correction_bias included, Mixtral's block_sparse_moe, per-expert names).
TEST_P(Checkpoint, ParameterNamesAreHuggingFaceNames) {
  auto model = load_model(fixture(GetParam()));
  const auto ckpt = io::SafetensorsCheckpoint::open(fixture(GetParam()));
  std::vector<std::string> names;
  for (const auto& [n, p] : model->named_parameters()) names.push_back(n);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, ckpt.names());
}

// Incremental decoding reproduces the full forward (MLA caches per-head K/V).
TEST_P(Checkpoint, KvCacheDecodeMatchesFullForward) {
  auto model = load_model(fixture(GetParam()));
  const auto ref = io::SafetensorsFile::open(fixture(GetParam()) + "/reference.safetensors");
  const Tensor ids = narrow(load_ref(ref, "input_ids"), 0, 0, 1);  // [1, T]
  const Tensor full = model->forward(ids);                         // [1, T, V]
  KVCache cache = model->new_cache();
  const int64_t t = ids.size(1), prompt = 5;
  Tensor first = model->forward(narrow(ids, 1, 0, prompt).contiguous(), &cache);
  EXPECT_LE(max_abs_diff(first, narrow(full, 1, 0, prompt).contiguous()), 1e-5);
  for (int64_t i = prompt; i < t; ++i) {
    Tensor step = model->forward(narrow(ids, 1, i, 1).contiguous(), &cache);
    EXPECT_LE(max_abs_diff(step, narrow(full, 1, i, 1).contiguous()), 1e-5) << "position " << i;
  }
  EXPECT_EQ(cache.length, t);
  EXPECT_THROW(model->forward(narrow(ids, 1, 0, 2).contiguous(), &cache), ValueError);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Checkpoint,
                         ::testing::Values("qwen3", "qwen3_moe", "mixtral", "deepseek_v3",
                                           "deepseek_v3_yarn", "mistral", "qwen2_sliding"));

// HF adds router_aux_loss_coef · load-balancing loss only with output_router_logits; the fixtures
// set it, so turning it off must leave the plain cross-entropy, smaller by a positive aux term.
TEST(Models, RouterAuxLossFollowsOutputRouterLogits) {
  const std::string dir = fixture("qwen3_moe");
  ModelConfig c = read_model_config(dir);
  ASSERT_TRUE(c.output_router_logits);
  EXPECT_DOUBLE_EQ(c.router_aux_loss_coef, 0.1);
  auto with_aux = load_model(dir);
  c.output_router_logits = false;
  std::shared_ptr<CausalLM> plain;
  {
    nn::SkipInitGuard skip;
    plain = build_model(c);
  }
  load_weights(*plain, dir);
  const auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const Tensor ids = load_ref(ref, "input_ids");
  const double a = with_aux->loss(ids).item(), p = plain->loss(ids).item();
  // The balancing loss is top_k (2) at perfect balance and at most num_experts · top_k; ×0.1.
  EXPECT_GT(a - p, 0.1);
  EXPECT_LE(a - p, 0.1 * 8 * 2);
  // DeepSeek-V3 has no router loss whatever the config says.
  ModelConfig d = read_model_config(fixture("deepseek_v3"));
  EXPECT_FALSE(d.output_router_logits);
}

TEST(Models, RopeTablesFromInvFreqMatchTheDefaultOp) {
  const ModelConfig c = read_model_config(fixture("llama"));
  const RopeFrequencies f = rope_frequencies(c, c.head_dim);
  ASSERT_EQ(f.inv_freq.size(), static_cast<size_t>(c.head_dim / 2));
  auto [c1, s1] = rope_cos_sin(20, c.head_dim, c.rope_theta);
  auto [c2, s2] = rope_cos_sin_from_inv_freq(f.inv_freq, 4, 16);
  // Rows 4.. of the full table; inv_freq is rounded to f32 like transformers, hence the tolerance.
  EXPECT_LE(max_abs_diff(narrow(c1, 0, 4, 16).contiguous(), c2), 1e-5);
  EXPECT_LE(max_abs_diff(narrow(s1, 0, 4, 16).contiguous(), s2), 1e-5);
  EXPECT_THROW(rope_cos_sin_from_inv_freq({}, 0, 4), ValueError);
}

TEST(Models, RandomInitFollowsHuggingFace) {
  ModelConfig c = read_model_config(fixture("qwen2"));
  c.initializer_range = 0.05;
  auto m = build_model(c);
  for (const auto& [name, p] : m->named_parameters()) {
    const auto v = p.to_vector();
    double s = 0, ss = 0;
    for (double x : v) s += x, ss += x * x;
    const double mean = s / double(v.size()), var = ss / double(v.size()) - mean * mean;
    if (name.find("norm") != std::string::npos) {
      EXPECT_EQ(mean, 1.0) << name;
    } else if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") {
      EXPECT_EQ(ss, 0.0) << name;
    } else {
      EXPECT_NEAR(std::sqrt(var), 0.05, 0.005) << name;
    }
  }
}

TEST(Models, LoadsIntoBf16) {
  auto f32 = load_model(fixture("llama"));
  auto bf16 = load_model(fixture("llama"), DType::bf16);
  EXPECT_EQ(bf16->parameter("model.embed_tokens.weight").dtype(), DType::bf16);
  const Tensor ids = from_vector({1, 5, 9, 2, 7, 3}, {1, 6}, DType::i64);
  const Tensor a = f32->forward(ids), b = bf16->forward(ids).to(DType::f32);
  EXPECT_LE(max_abs_diff(a, b), 0.1);
}

}  // namespace
}  // namespace hp::models
