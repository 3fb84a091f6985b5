// Context parallelism at cp = the world size (1-4 ranks; 3 gives an odd ring): ring attention and
// Ulysses equal one rank's causal attention over the whole sequence in output and q/k/v gradients
// (f32, 1e-5 relative, GQA, chunks that cross the flash kernel's blocks); a whole model's loss
// shares and gradients, summed over the cp ranks, equal the one-rank loss and gradients (Llama,
// Qwen3 with q/k norms, Qwen3-MoE with its router loss, dynamic / YaRN / Llama-3 RoPE,
// DeepSeek-V3's MLA with MoE layers; labels with ignored positions), also with packed documents
// (attention within each document and positions restarting: ring and Ulysses take the rows'
// document ids); bad lengths and head counts fail naming the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "error_of.h"
#include "expect_close.h"
#include "hp/core/random.h"
#include "hp/dist/communicator.h"
#include "hp/models/context_plan.h"
#include "hp/models/hf/config.h"
#include "hp/models/moe.h"
#include "hp/models/hf/registry.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"
#include "hp/parallel/context_parallel.h"
#include "test_dir.h"
#include "models/tiny_models.h"

namespace hp::parallel {
namespace {

// The tests build meshes and layouts with shard's algebra.
using namespace hp::shard;

using hp::testing::error_of;
using hp::testing::expect_close;

TEST(ContextParallel, SpansZigzagAndErrors) {
  const auto s = context_spans(16, 4, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].start, 2);
  EXPECT_EQ(s[1].start, 12);
  EXPECT_EQ(s[1].length, 2);
  EXPECT_EQ(context_spans(7, 1, 0).front().length, 7);
  EXPECT_NE(error_of([] { context_spans(18, 4, 0); }).find("18 tokens does not split into 2 × cp = 8"),
            std::string::npos);
  EXPECT_NE(error_of([] { context_spans(16, 4, 4); }).find("rank 4 of 4"), std::string::npos);
  Tensor x = arange(12, DType::i64);
  EXPECT_EQ(context_shard(unsqueeze(x, 0), 1, 3, 2).to_vector(),
            (std::vector<double>{4, 5, 6, 7}));
  EXPECT_NE(error_of([] { context_method_from_name("ulysses"); }).find("'ulysses' (ring or alltoall)"),
            std::string::npos);
}

// Document ids [b, len] of rows cut into documents of the given lengths in turn (row r starting
// at lengths[r % size]), as i32.
Tensor document_ids(int64_t b, int64_t len, const std::vector<int64_t>& lengths) {
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < b; ++r) {
    int32_t id = 0;
    size_t next = size_t(r) % lengths.size();
    for (int64_t t = 0, left = lengths[next]; t < len; ++t) {
      if (left == 0) ++id, next = (next + 1) % lengths.size(), left = lengths[next];
      ids.push_back(id), --left;
    }
  }
  return from_data<int32_t>(ids, {b, len});
}

void check_attention(ContextMethod method, int64_t hq, int64_t hkv, int64_t chunk,
                     const std::vector<int64_t>& doc_lengths = {}) {
  auto world = dist::world();
  const int64_t n = world->size(), r = world->rank(), b = 2, d = 8, len = 2 * n * chunk;
  const std::string what = std::string(method == ContextMethod::ring ? "ring" : "alltoall") +
                           " Hq " + std::to_string(hq) + " Hkv " + std::to_string(hkv) + " chunk " +
                           std::to_string(chunk) + " at " + std::to_string(n) +
                           (doc_lengths.empty() ? "" : " with documents");
  manual_seed(5);
  Tensor q = randn({b, hq, len, d}), k = randn({b, hkv, len, d}), v = randn({b, hkv, len, d}),
         w = randn({b, hq, len, d});
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
  const Tensor seg = doc_lengths.empty() ? Tensor() : document_ids(b, len, doc_lengths);
  const Tensor ref = scaled_dot_product_attention(q, k, v, true, std::nullopt, seg);
  sum(mul(ref, w)).backward();
  auto local = [&](const Tensor& t) { return contiguous(context_shard(t, 2, n, r)); };
  Tensor ql = local(q.detach()), kl = local(k.detach()), vl = local(v.detach());
  for (Tensor* t : {&ql, &kl, &vl}) t->requires_grad_(true);
  // q and k as strided views ([B, T, H, D] storage), as the attention blocks hand them over.
  const Tensor qv = transpose(contiguous(transpose(ql, 1, 2)), 1, 2);
  const Tensor o = context_attention(qv, kl, vl, 0.0, method, world, seg);
  sum(mul(o, local(w))).backward();
  expect_close(o.detach(), local(ref.detach()), 1e-5, what + " output");
  expect_close(ql.grad(), local(q.grad()), 1e-5, what + " dq");
  expect_close(kl.grad(), local(k.grad()), 1e-5, what + " dk");
  expect_close(vl.grad(), local(v.grad()), 1e-5, what + " dv");
}

TEST(ContextParallel, RingEqualsOneRankAttention) {
  for (int64_t chunk : {5, 40})
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{12, 2}, {12, 12}})
      check_attention(ContextMethod::ring, hq, hkv, chunk);
}

// Packed documents: lengths of 1, documents inside one zigzag chunk and across several, so some
// ring blocks hide every key from some queries (merged by their -inf log-sum-exp).
TEST(ContextParallel, RingAndUlyssesWithDocumentsEqualOneRank) {
  for (int64_t chunk : {5, 40})
    for (const std::vector<int64_t>& lengths :
         {std::vector<int64_t>{7, 1, 13, 30}, {1}, {2 * chunk + 3, 4}})
      for (ContextMethod m : {ContextMethod::ring, ContextMethod::alltoall})
        check_attention(m, 12, m == ContextMethod::ring ? 2 : 4, chunk, lengths);
}

TEST(ContextParallel, UlyssesEqualsOneRankAttention) {
  // 12 query heads divide by 1-4 ranks; 2 kv heads do not at 3 and 4 (repeated to the queries).
  for (int64_t chunk : {5, 40})
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{12, 2}, {12, 4}})
      check_attention(ContextMethod::alltoall, hq, hkv, chunk);
}

TEST(ContextParallel, UlyssesNeedsHeadsDividingByCp) {
  auto world = dist::world();
  const int64_t n = world->size();
  if (n == 1) GTEST_SKIP() << "one rank: every head count divides";
  Tensor q = randn({1, n + 1, 2 * 3, 4}), k = randn({1, 1, 2 * 3, 4});
  const std::string e =
      error_of([&] { context_attention(q, k, k, 0.0, ContextMethod::alltoall, world); });
  EXPECT_NE(e.find(std::to_string(n + 1) + " query heads (per tensor-parallel rank) do not divide "
                   "by cp = " + std::to_string(n)),
            std::string::npos)
      << e;
}

// A whole model: the cp ranks' loss shares and gradients sum to the one-rank loss and gradients.
void check_model(const models::ModelConfig& c, ContextMethod method, const std::string& name,
                 bool documents = false) {
  const double rel = 1e-5;
  auto world = dist::world();
  const int64_t n = world->size(), len = 2 * n * 6;
  manual_seed(11);
  auto ref = models::build_model(c);
  manual_seed(11);
  auto cp = models::build_model(c);
  cp->set_context_split(models::context_parallel_split(
      n, world->rank(),
      [world, method](const Tensor& q, const Tensor& k, const Tensor& v, double s,
                      const Tensor& segments) {
        return context_attention(q, k, v, s, method, world, segments);
      },
      [world](const std::vector<double>& x) {
        return world->all_reduce(from_data<double>(x, {int64_t(x.size())}), dist::ReduceOp::sum)
            .to_vector();
      }));
  // ids [2, len + 1] (the loader's rows: len targets), some labels ignored.
  std::vector<int64_t> ids, labels;
  for (int64_t i = 0; i < 2 * (len + 1); ++i) {
    ids.push_back((i * 31 + 7) % c.vocab_size);
    labels.push_back(i % 7 == 3 ? -100 : ids.back());
  }
  const Tensor t_ids = from_data<int64_t>(ids, {2, len + 1}),
               t_lab = from_data<int64_t>(labels, {2, len + 1});
  // Packed documents: positions restarting at documents of 9, 1, 4 and 17 tokens in turn.
  models::PackedDocuments docs;
  if (documents) {
    const std::vector<double> seg = document_ids(2, len + 1, {9, 1, 4, 17}).to_vector();
    std::vector<int64_t> pos(seg.size());
    for (size_t i = 1; i < seg.size(); ++i)
      pos[i] = int64_t(i) % (len + 1) == 0 || seg[i] != seg[i - 1] ? 0 : pos[i - 1] + 1;
    docs = {from_data<int64_t>(pos, {2, len + 1}), true, true};
  }
  const Tensor l_ref = ref->loss(t_ids, t_lab, docs);
  l_ref.backward();
  const Tensor l_cp = cp->loss(t_ids, t_lab, docs);
  l_cp.backward();
  const std::string what =
      name + " at cp " + std::to_string(n) + (documents ? " with documents" : "");
  const double total = world->all_reduce(from_data<double>({l_cp.item()}, {1}), dist::ReduceOp::sum)
                           .to_vector()[0];
  EXPECT_NEAR(total, l_ref.item(), rel * std::abs(l_ref.item())) << what << " loss";
  const auto rp = ref->named_parameters(), cpp = cp->named_parameters();
  ASSERT_EQ(rp.size(), cpp.size());
  for (size_t i = 0; i < rp.size(); ++i) {
    const Tensor g = cpp[i].second.grad();
    // Buffers the loss does not reach (DeepSeek's e_score_correction_bias) have none either way.
    ASSERT_EQ(g.defined(), rp[i].second.grad().defined()) << what << " " << cpp[i].first;
    if (!g.defined()) continue;
    expect_close(world->all_reduce(contiguous(g), dist::ReduceOp::sum), rp[i].second.grad(), rel,
                 what + " grad " + rp[i].first);
  }
}

TEST(ContextParallel, ModelLossAndGradientsSumToOneRank) {
  const int64_t n = dist::world()->size();
  for (const std::string type : {"llama", "qwen3"})
    for (ContextMethod m : {ContextMethod::ring, ContextMethod::alltoall}) {
      models::ModelConfig c = models::testing::tiny_config(type, 64, 2);  // 4 heads, 2 kv heads
      if (m == ContextMethod::alltoall && c.num_attention_heads % n != 0) continue;
      check_model(c, m, type + (m == ContextMethod::ring ? " ring" : " alltoall"));
    }
  // Qwen3-MoE: routing and experts on this rank's tokens. Without the router loss here: the
  // one-rank forward also routes each row's last token (whose logits the loss never uses), so
  // its router loss counts L + 1 rows a row and the cp ranks' L (the shares' own exactness is
  // RouterLossSharesSumToTheWholeLoss).
  models::ModelConfig moe = models::testing::tiny_config("qwen3_moe", 64, 2);
  moe.router_aux_loss_coef = 0.0;
  check_model(moe, ContextMethod::ring, "qwen3_moe ring");
  // Scaled RoPE: positions past max_position_embeddings (dynamic NTK's frequencies follow the
  // whole row's length, not a rank's), YaRN and Llama-3 over a short original context.
  for (const std::string type : {"dynamic", "yarn", "llama3"}) {
    models::ModelConfig c = models::testing::tiny_config("llama", 64, 2);
    c.max_position_embeddings = 8;
    c.rope_scaling.type = type;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8;
    check_model(c, ContextMethod::ring, "llama rope " + type);
  }
  // MLA (DeepSeek-V3: q/kv LoRA, decoupled rotary dims, padded v) with its MoE layers.
  const models::ModelConfig mla =
      models::read_model_config(std::string(HP_TEST_DIR) + "/../models/fixtures/deepseek_v3");
  check_model(mla, ContextMethod::ring, "deepseek_v3 ring");
}

// Packed documents (data.document_mask + reset_position_ids) under cp: the shares still sum to
// the one-rank loss and gradients — ring and Ulysses, dynamic NTK (the tables span the whole
// window's longest document on every rank), MLA.
TEST(ContextParallel, ModelWithPackedDocumentsSumsToOneRank) {
  const int64_t n = dist::world()->size();
  for (ContextMethod m : {ContextMethod::ring, ContextMethod::alltoall}) {
    const models::ModelConfig c = models::testing::tiny_config("qwen3", 64, 2);
    if (m == ContextMethod::alltoall && c.num_attention_heads % n != 0) continue;
    check_model(c, m, m == ContextMethod::ring ? "qwen3 ring" : "qwen3 alltoall", true);
  }
  models::ModelConfig dyn = models::testing::tiny_config("llama", 64, 2);
  dyn.max_position_embeddings = 8;
  dyn.rope_scaling.type = "dynamic";
  dyn.rope_scaling.factor = 4.0;
  check_model(dyn, ContextMethod::ring, "llama rope dynamic", true);
  const models::ModelConfig mla =
      models::read_model_config(std::string(HP_TEST_DIR) + "/../models/fixtures/deepseek_v3");
  check_model(mla, ContextMethod::ring, "deepseek_v3 ring", true);
}

// The router loss over rows split across ranks: the ranks' shares (global expert counts) sum to
// the loss over all rows, and their gradients are that loss's gradients of each rank's rows.
TEST(ContextParallel, RouterLossSharesSumToTheWholeLoss) {
  auto world = dist::world();
  const int64_t n = world->size(), r = world->rank(), rows = 6, experts = 5;
  manual_seed(3);
  std::vector<Tensor> all = {randn({rows * n, experts}), randn({rows * n, experts})};
  for (Tensor& t : all) t.requires_grad_(true);
  const Tensor whole = models::load_balancing_loss(all, experts, 2);
  whole.backward();
  std::vector<Tensor> mine;
  for (const Tensor& t : all) mine.push_back(contiguous(narrow(t.detach(), 0, r * rows, rows)));
  for (Tensor& t : mine) t.requires_grad_(true);
  const Tensor share = models::load_balancing_loss(
      mine, experts, 2, [world](const std::vector<double>& x) {
        return world->all_reduce(from_data<double>(x, {int64_t(x.size())}), dist::ReduceOp::sum)
            .to_vector();
      });
  share.backward();
  const double total =
      world->all_reduce(from_data<double>({share.item()}, {1}), dist::ReduceOp::sum).to_vector()[0];
  EXPECT_NEAR(total, whole.item(), 1e-6 * std::abs(whole.item()));
  for (size_t i = 0; i < all.size(); ++i)
    expect_close(mine[i].grad(), narrow(all[i].grad(), 0, r * rows, rows), 1e-6,
                 "router logits grad " + std::to_string(i));
}

}  // namespace
}  // namespace hp::parallel
