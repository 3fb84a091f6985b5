// FSDP over a world of one — the trainer's mixed precision: bf16 compute on f32 masters equals a
// plain bf16-weight model bit for bit; f32 changes nothing (no copies); micro-batch accumulation
// in f32; recompute inside the FSDP wrapper; gathered parameters really freed after forward.
#include "hp/fsdp/fsdp.h"

#include <gtest/gtest.h>

#include "fsdp/tiny_model.h"
#include "hp/core/tensor_data.h"

namespace hp::fsdp {
namespace {

using testing::scaled_sum_loss;
using testing::tiny_model;
using testing::token_batch;

constexpr int64_t kVocab = 37;

FsdpOptions options(DType param, bool reshard = true) {
  FsdpOptions o;
  o.param_dtype = param;
  o.reshard_after_forward = reshard;
  return o;
}

std::unique_ptr<FsdpModel> wrap(models::CausalLM& m, FsdpOptions o) {
  return std::make_unique<FsdpModel>(m, groups_by_glob(m, {"model.layers.*"}), nullptr, nullptr, o);
}

// The same weights as `src` (before wrapping), rounded to bf16.
std::shared_ptr<models::CausalLM> bf16_copy(const models::CausalLM& src) {
  auto m = models::build_model(testing::tiny_qwen3(DType::bf16));
  auto from = src.named_parameters();
  auto to = m->named_parameters();
  EXPECT_EQ(from.size(), to.size());
  for (size_t k = 0; k < to.size(); ++k) to[k].second.copy_from(from[k].second);
  return m;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(a.to_vector(), b.to_vector()) << what;
}

TEST(Fsdp, GroupsByGlob) {
  auto m = tiny_model(1);
  Groups g = groups_by_glob(*m, {"model.layers.*"});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].prefix, "model.layers.0");
  EXPECT_EQ(g[1].prefix, "model.layers.1");
  EXPECT_EQ(g[1].module, m->model->layers[1].get());
  EXPECT_THROW(groups_by_glob(*m, {"model.blocks.*"}), ValueError);
}

TEST(Fsdp, RejectsBadGroupsAndDtypes) {
  auto m = tiny_model(1);
  EXPECT_THROW(FsdpModel(*m, {{"model.layer.0", m->model->layers[0].get(), {}, nullptr}}, nullptr, nullptr,
                         options(DType::bf16)),
               ValueError);
  EXPECT_THROW(
      FsdpModel(*m, {{"model", m->model.get(), {}, nullptr},
                     {"model.layers.0", m->model->layers[0].get(), {}, nullptr}},
                nullptr, nullptr, options(DType::bf16)),
      ValueError);
  struct Scalar : nn::Module {
    Scalar() { register_parameter("s", zeros({})); }
  } scalar;
  EXPECT_THROW(FsdpModel(scalar, {}, nullptr, nullptr, options(DType::bf16)), ValueError);
  EXPECT_TRUE(FsdpModel(scalar, {}, nullptr, nullptr, options(DType::f32)).passthrough());
  auto b = tiny_model(1, DType::bf16);
  EXPECT_THROW(FsdpModel(*b, {}, nullptr, nullptr, options(DType::bf16)), ValueError);
}

// World of one, param_dtype bf16: forward/backward run on bf16 casts of the masters, exactly as a
// model holding those bf16 weights; the f32 master grads are its bf16 grads, widened. `split`
// makes every layer two groups sharing its forward (its MLP by a parameter glob, the rest), as
// expert parallelism does with a layer's experts: the result is the same.
void expect_bf16_model(bool reshard, bool split) {
  auto m = tiny_model(3);
  auto ref = bf16_copy(*m);
  Groups groups;
  for (const Group& g : groups_by_glob(*m, {"model.layers.*"})) {
    groups.push_back(g);
    if (split) groups.push_back({g.prefix, g.module, {"mlp.*"}, nullptr});
  }
  FsdpModel f(*m, groups, nullptr, nullptr, options(DType::bf16, reshard));
  EXPECT_FALSE(f.passthrough());
  const Tensor ids = token_batch(1, 3, 7, kVocab);
  Tensor l = scaled_sum_loss(*m, ids, 1.0 / 18);
  Tensor lr = scaled_sum_loss(*ref, ids, 1.0 / 18);
  EXPECT_EQ(l.item(), lr.item());
  l.backward();
  lr.backward();
  f.finish_grads();
  auto shards = f.sharded_parameters();
  auto want = ref->named_parameters();
  ASSERT_EQ(shards.size(), want.size());
  for (size_t k = 0; k < shards.size(); ++k) {
    EXPECT_EQ(shards[k].first, want[k].first);
    EXPECT_EQ(shards[k].second.dtype(), DType::f32);
    ASSERT_TRUE(shards[k].second.grad().defined()) << shards[k].first;
    EXPECT_EQ(shards[k].second.grad().dtype(), DType::f32);
    expect_same(shards[k].second.grad(), want[k].second.grad().to(DType::f32), shards[k].first);
  }
}

TEST(Fsdp, Bf16OnOneProcessEqualsBf16Model) {
  for (bool reshard : {true, false}) expect_bf16_model(reshard, false);
}

TEST(Fsdp, GroupsSharingAModuleSplitItsParametersByGlob) {
  for (bool reshard : {true, false}) expect_bf16_model(reshard, true);
  auto m = tiny_model(1);
  nn::Module* layer = m->model->layers[0].get();
  try {
    FsdpModel(*m, {{"model.layers.0", layer, {"nope.*"}, nullptr}}, nullptr, nullptr,
              options(DType::bf16));
    FAIL() << "a glob matching nothing was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope.*' matches nothing"), std::string::npos)
        << e.what();
  }
}

// World of one, f32: the module's parameters are the masters — nothing allocated, nothing
// changed, bit-identical steps.
TEST(Fsdp, F32OnOneProcessIsPassthrough) {
  auto m = tiny_model(5), ref = tiny_model(5);
  auto params = m->named_parameters();
  const int64_t live = Allocator::instance().stats(MemTier::device).live_bytes;
  auto f = wrap(*m, options(DType::f32));
  EXPECT_EQ(Allocator::instance().stats(MemTier::device).live_bytes, live);
  EXPECT_TRUE(f->passthrough());
  auto shards = f->parameters();  // DTensors: Shard(0) over a mesh of one rank
  ASSERT_EQ(shards.size(), params.size());
  for (size_t k = 0; k < shards.size(); ++k) {
    const shard::DTensor& d = shards[k].second;
    EXPECT_TRUE(d.local().same(params[k].second)) << shards[k].first;
    EXPECT_EQ(d.offsets(), Shape(params[k].second.dim(), 0));
    EXPECT_EQ(d.global_shape(), params[k].second.shape());
  }
  for (int mb = 0; mb < 2; ++mb) {
    const Tensor ids = token_batch(10 + mb, 2, 6, kVocab);
    Tensor l = scaled_sum_loss(*m, ids, 0.1), lr = scaled_sum_loss(*ref, ids, 0.1);
    EXPECT_EQ(l.item(), lr.item());
    l.backward();
    lr.backward();
  }
  f->finish_grads();
  auto want = ref->named_parameters();
  for (size_t k = 0; k < shards.size(); ++k)
    expect_same(shards[k].second.local().grad(), want[k].second.grad(), shards[k].first);
  EXPECT_EQ(f->stats().all_gather_bytes + f->stats().reduce_scatter_bytes, 0);
}

// Two micro-batches: the master grads are the f32 sum of each micro-batch's bf16 gradients.
TEST(Fsdp, AccumulatesMicroBatchesInF32) {
  auto m = tiny_model(7);
  auto ref = bf16_copy(*m);
  auto f = wrap(*m, options(DType::bf16));
  std::vector<Tensor> sum_ref;
  for (int mb = 0; mb < 2; ++mb) {
    const Tensor ids = token_batch(20 + mb, 2, 6, kVocab);
    scaled_sum_loss(*m, ids, 0.1).backward();
    scaled_sum_loss(*ref, ids, 0.1).backward();
    auto rp = ref->named_parameters();
    for (size_t k = 0; k < rp.size(); ++k) {
      Tensor g = rp[k].second.grad().to(DType::f32);
      sum_ref.resize(rp.size());
      sum_ref[k] = sum_ref[k].defined() ? add(sum_ref[k], g) : g;
      rp[k].second.zero_grad();
    }
  }
  f->finish_grads();
  auto shards = f->sharded_parameters();
  for (size_t k = 0; k < shards.size(); ++k)
    expect_same(shards[k].second.grad(), sum_ref[k], shards[k].first);
}

// A recompute wrapper inside FSDP's on each layer: same loss and gradients as without.
TEST(Fsdp, RecomputeInsideFsdp) {
  auto m = tiny_model(9);
  auto ref = bf16_copy(*m);
  testing::add_recompute(*m);
  auto f = wrap(*m, options(DType::bf16));
  const Tensor ids = token_batch(3, 2, 8, kVocab);
  Tensor l = scaled_sum_loss(*m, ids, 0.5), lr = scaled_sum_loss(*ref, ids, 0.5);
  EXPECT_EQ(l.item(), lr.item());
  l.backward();
  lr.backward();
  f->finish_grads();
  auto shards = f->sharded_parameters();
  auto want = ref->named_parameters();
  for (size_t k = 0; k < shards.size(); ++k)
    expect_same(shards[k].second.grad(), want[k].second.grad().to(DType::f32), shards[k].first);
}

// reshard_after_forward frees the layers' gathered parameters after forward even though backward
// needs them (saved tensors do not pin them): forward allocates exactly the layers' bf16 bytes
// less than with reshard off. The root stays gathered until finish_grads.
TEST(Fsdp, ReshardAfterForwardFreesGatheredParameters) {
  int64_t layer_bytes = 0;
  std::vector<int64_t> grown;
  for (bool reshard : {true, false}) {
    auto m = tiny_model(11);
    layer_bytes = 0;
    for (auto& l : m->model->layers) layer_bytes += l->num_parameters() * 2;
    auto f = wrap(*m, options(DType::bf16, reshard));
    const Tensor ids = token_batch(4, 2, 6, kVocab);
    const int64_t before = Allocator::instance().stats(MemTier::device).live_bytes;
    Tensor l = scaled_sum_loss(*m, ids, 0.1);
    grown.push_back(Allocator::instance().stats(MemTier::device).live_bytes - before);
    for (auto& layer : m->model->layers)
      for (auto& [name, t] : layer->named_parameters()) EXPECT_EQ(has_data(t), !reshard) << name;
    EXPECT_TRUE(has_data(m->model->embed_tokens->weight));
    EXPECT_EQ(m->model->embed_tokens->weight.dtype(), DType::bf16);
    l.backward();
    f->finish_grads();
    for (auto& [name, t] : m->named_parameters()) EXPECT_FALSE(has_data(t)) << name;
  }
  EXPECT_EQ(grown[1] - grown[0], layer_bytes);
}

}  // namespace
}  // namespace hp::fsdp
