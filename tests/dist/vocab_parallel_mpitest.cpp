// Vocabulary parallelism: an embedding sharded by VocabParallelEmbedding equals the one-rank
// nn::Embedding in forward and in the (gathered) weight gradient, for uneven and empty vocabulary
// slices; vocab_parallel_cross_entropy on sharded logits equals hp::cross_entropy on the full ones
// in value and gradient; bad calls fail with the same error on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "error_of.h"
#include "hp/ops/ops.h"
#include "hp/parallel/vocab_parallel.h"

namespace hp::parallel {
namespace {

// The tests build meshes and layouts with shard's algebra.
using namespace hp::shard;

// Within rel · max|b| (normwise relative): the sharded logsumexp is combined from per-slice ones,
// so it may differ from the one-pass value by an f32 ulp (≈1e-6 relative at lse ≈ 10), which
// every exp(x - lse) of the gradient inherits.
void expect_close(const Tensor& a, const Tensor& b, double rel, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto av = a.to_vector(), bv = b.to_vector();
  double scale = 0;
  for (double v : bv) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < av.size(); ++i)
    ASSERT_NEAR(av[i], bv[i], rel * scale) << what << " [" << i << "]";
}

using hp::testing::error_of;

// [2, T] ids covering 0 and vocab - 1, the same on every rank for the same shift.
Tensor make_ids(int64_t vocab, int64_t t, int64_t shift = 0) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 2 * t; ++i) v.push_back((i * 37 + 11 + shift) % vocab);
  v[0] = 0;
  v[1] = vocab - 1;
  return from_data<int64_t>(v, {2, t});
}

// Vocab 257 (129 + 128 over 2), 7 (2, 2, 2, 1 over 4) and 5 (2, 2, 1, 0 over 4: an empty slice);
// output Replicate and Shard(1) with T = 5 (uneven over 2, 3 and 4 ranks).
// On a {dp, tp} mesh each dp group feeds its own ids; the weight is Shard(0) over tp only.
void check_embedding(int64_t vocab, const Placement& layout, bool with_dp = false) {
  const std::string what = "vocab " + std::to_string(vocab) + " " + placement_str(layout);
  auto mesh = with_dp ? make_mesh({{"dp", 2}, {"tp", -1}}) : make_mesh({{"tp", -1}});
  const int64_t tp_axis = mesh->axis("tp");
  const int64_t hidden = 6, T = 5;
  manual_seed(17);
  nn::Embedding ref(vocab, hidden);
  manual_seed(17);
  nn::Embedding tp(vocab, hidden);
  ShardedParameters sp =
      parallelize_module(tp, mesh, "tp", {{"", std::make_shared<VocabParallelEmbedding>(layout)}});
  const auto vr = chunk_range(vocab, mesh->size(tp_axis), mesh->coordinate(tp_axis));
  EXPECT_EQ(tp.weight.shape(), (Shape{vr.length, hidden})) << what;
  EXPECT_TRUE(sp.at("weight").local().same(tp.weight)) << what;
  EXPECT_EQ(sp.at("weight").placements(),
            with_dp ? (Placements{Replicate{}, Shard{0}}) : (Placements{Shard{0}}))
      << what;
  EXPECT_EQ(sp.at("weight").global_shape(), (Shape{vocab, hidden})) << what;

  Tensor ids = make_ids(vocab, T, with_dp ? 3 * mesh->coordinate(0) : 0),
         target = randn({2, T, hidden});
  const bool seq = is_shard(layout);
  const auto r =
      seq ? chunk_range(T, mesh->size(tp_axis), mesh->coordinate(tp_axis)) : ChunkRange{0, T};
  auto rows = [&](const Tensor& a) { return narrow(a, 1, r.start, r.length).contiguous(); };
  Tensor yr = ref.forward(ids), yt = tp.forward(ids);
  sum(yr * target).backward();
  sum(yt * rows(target)).backward();
  ASSERT_EQ(yt.shape(), (Shape{2, r.length, hidden})) << what;
  expect_close(yt.detach(), rows(yr.detach()), 1e-6, what + " forward");
  if (seq) {
    Placements p(static_cast<size_t>(mesh->ndim()), Replicate{});
    p[static_cast<size_t>(tp_axis)] = Shard{1};
    expect_close(DTensor::from_local(yt.detach(), mesh, p, {2, T, hidden}).full_tensor(),
                 yr.detach(), 1e-6, what + " gathered forward");
  }
  ASSERT_TRUE(tp.weight.grad().defined()) << what << ": every rank's slice has a gradient";
  const DTensor& d = sp.at("weight");
  expect_close(DTensor::from_local(tp.weight.grad(), d.mesh(), d.placements(), d.global_shape())
                   .full_tensor(),
               ref.weight.grad(), 1e-6, what + " dweight");
}

TEST(VocabParallel, EmbeddingMatchesOneRank) {
  for (int64_t vocab : {257, 7, 5}) {
    check_embedding(vocab, Replicate{});
    check_embedding(vocab, Shard{1});
  }
}

// On {dp: 2, tp: W/2} (even world sizes) the reduction runs over tp only, each dp group with its
// own ids.
TEST(VocabParallel, EmbeddingOnTwoDimMesh) {
  if (dist::world()->size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  check_embedding(5, Replicate{}, true);
  check_embedding(5, Shard{1}, true);
}

TEST(VocabParallel, EmbeddingErrors) {
  auto mesh = make_mesh({{"tp", -1}});
  nn::Embedding emb(9, 4);
  std::string e = error_of([&] {
    parallelize_module(emb, mesh, "tp",
                       {{"", std::make_shared<VocabParallelEmbedding>(Partial{})}});
  });
  EXPECT_NE(e.find("output layout must be Replicate or Shard"), std::string::npos) << e;
  nn::Linear lin(4, 4, false);
  e = error_of([&] {
    parallelize_module(lin, mesh, "tp", {{"", std::make_shared<VocabParallelEmbedding>()}});
  });
  EXPECT_NE(e.find("applies to nn::Embedding"), std::string::npos) << e;
  // An id outside the vocabulary fails on every rank (ids are the same everywhere).
  parallelize_module(emb, mesh, "tp", {{"", std::make_shared<VocabParallelEmbedding>()}});
  e = error_of([&] { emb.forward(from_data<int64_t>({1, 9}, {1, 2})); });
  EXPECT_NE(e.find("id 9 at flat index 1"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range [0, 9)"), std::string::npos) << e;
  // The forward still works (and stays collective) afterwards.
  EXPECT_EQ(emb.forward(from_data<int64_t>({1, 8}, {1, 2})).shape(), (Shape{1, 2, 4}));
}

// Rows of the [N, V] logits with targets covering 0, V - 1 and some ignored (-100) rows.
Tensor make_targets(int64_t n, int64_t vocab, bool i32 = false) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((i * 53 + 3) % vocab);
  v[0] = 0;
  v[1] = vocab - 1;
  v[4] = v[7] = -100;
  Tensor t = from_data<int64_t>(v, {n});
  return i32 ? t.to(DType::i32) : t;
}

// Sharded logits (torch.chunk columns) against hp::cross_entropy on the full [N, V] logits; the
// upstream gradient 2.5 checks its scaling.
void check_cross_entropy(int64_t vocab, const std::string& reduction, bool i32) {
  const std::string what = "vocab " + std::to_string(vocab) + " " + reduction;
  auto mesh = make_mesh({{"tp", -1}});
  const dist::CommPtr comm = mesh->axis_comm(0);
  const int64_t n = 11;
  manual_seed(23);
  Tensor logits = mul(randn({n, vocab}), 3.0), targets = make_targets(n, vocab, i32);
  Tensor full = logits.clone().requires_grad_();
  Tensor ref = cross_entropy(full, targets, -100, reduction);
  mul(ref, 2.5).backward();
  const auto vr = chunk_range(vocab, mesh->size(0), mesh->coordinate(0));
  Tensor local = narrow(logits, 1, vr.start, vr.length).contiguous().requires_grad_();
  Tensor loss = vocab_parallel_cross_entropy(local, targets, vr.start, comm, -100, reduction);
  ASSERT_EQ(loss.dim(), 0) << what;
  EXPECT_EQ(loss.dtype(), DType::f32) << what;
  EXPECT_NEAR(loss.item(), ref.item(), 1e-6 * std::abs(ref.item())) << what;
  // The same scalar on every rank.
  Tensor lv = from_vector({loss.item()}, {1});
  EXPECT_EQ(comm->all_reduce(lv, dist::ReduceOp::max).item(),
            comm->all_reduce(lv, dist::ReduceOp::min).item())
      << what;
  mul(loss, 2.5).backward();
  ASSERT_TRUE(local.grad().defined()) << what;
  ASSERT_EQ(local.grad().shape(), (Shape{n, vr.length})) << what;
  expect_close(DTensor::from_local(local.grad(), mesh, {Shard{1}}, {n, vocab}).full_tensor(),
               full.grad(), 1e-6, what + " gathered dlogits");
}

TEST(VocabParallel, CrossEntropyMatchesOneRank) {
  for (int64_t vocab : {257, 7, 5}) {
    check_cross_entropy(vocab, "mean", false);
    check_cross_entropy(vocab, "sum", true);
  }
}

// Over a communicator of one (each rank alone) it is hp::cross_entropy, bitwise.
TEST(VocabParallel, CrossEntropyOverOneRankIsCrossEntropy) {
  const dist::CommPtr self = dist::world()->split(dist::world()->rank(), 0);
  ASSERT_EQ(self->size(), 1);
  manual_seed(29);
  Tensor logits = randn({9, 33}), targets = make_targets(9, 33);
  for (const std::string reduction : {"mean", "sum"}) {
    Tensor a = logits.clone().requires_grad_(), b = logits.clone().requires_grad_();
    Tensor la = cross_entropy(a, targets, -100, reduction);
    Tensor lb = vocab_parallel_cross_entropy(b, targets, 0, self, -100, reduction);
    EXPECT_EQ(la.item(), lb.item()) << reduction;
    la.backward();
    lb.backward();
    EXPECT_EQ(a.grad().to_vector(), b.grad().to_vector()) << reduction;
  }
}

// Every row ignored: loss 0 and a zero gradient for "mean" (as hp::cross_entropy), no NaN.
TEST(VocabParallel, CrossEntropyAllIgnored) {
  auto mesh = make_mesh({{"tp", -1}});
  const auto vr = chunk_range(10, mesh->size(0), mesh->coordinate(0));
  Tensor local = randn({3, vr.length}).requires_grad_();
  Tensor loss = vocab_parallel_cross_entropy(local, from_data<int64_t>({-1, -1, -1}, {3}), vr.start,
                                             mesh->axis_comm(0), -1);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  for (double g : local.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

// Bad calls throw the same ValueError on every rank (no rank is left waiting in a reduction),
// also when only one rank's arguments are wrong.
TEST(VocabParallel, CrossEntropyErrorsOnEveryRank) {
  auto mesh = make_mesh({{"tp", -1}});
  const dist::CommPtr comm = mesh->axis_comm(0);
  const int64_t vocab = 257, n = 6;
  const auto vr = chunk_range(vocab, mesh->size(0), mesh->coordinate(0));
  Tensor local = randn({n, vr.length});
  Tensor targets = make_targets(n + 2, vocab);
  targets = narrow(targets, 0, 0, n).contiguous();
  targets.data<int64_t>()[3] = vocab;  // one past the global vocabulary
  std::string e = error_of([&] { vocab_parallel_cross_entropy(local, targets, vr.start, comm); });
  EXPECT_NE(e.find("[shard]"), std::string::npos) << e;
  EXPECT_NE(e.find("target 257 at row 3 is out of range [0, 257)"), std::string::npos) << e;
  targets.data<int64_t>()[3] = -5;
  e = error_of([&] { vocab_parallel_cross_entropy(local, targets, vr.start, comm); });
  EXPECT_NE(e.find("target -5 at row 3"), std::string::npos) << e;
  targets.data<int64_t>()[3] = 2;

  e = error_of([&] { vocab_parallel_cross_entropy(local, targets, vr.start, comm, -100, "none"); });
  EXPECT_NE(e.find("reduction 'none' is not one of mean, sum"), std::string::npos) << e;

  // Only the last rank passes bad logits: every rank throws.
  const bool last = comm->rank() == comm->size() - 1;
  Tensor bad = last ? local.to(DType::f64) : local;
  e = error_of([&] { vocab_parallel_cross_entropy(bad, targets, vr.start, comm); });
  EXPECT_NE(e.find(last ? "logits must be [N, V_local] f32" : "invalid arguments"),
            std::string::npos)
      << e;

  if (comm->size() > 1) {
    // Slices that do not tile the vocabulary (every rank claims offset 0).
    e = error_of([&] { vocab_parallel_cross_entropy(local, targets, 0, comm); });
    EXPECT_NE(e.find("vocabulary slices do not tile"), std::string::npos) << e;
    // Targets that differ across ranks.
    Tensor mine = targets.clone();
    mine.data<int64_t>()[0] = comm->rank();
    e = error_of([&] { vocab_parallel_cross_entropy(local, mine, vr.start, comm); });
    EXPECT_NE(e.find("targets differ"), std::string::npos) << e;
  }
  // Still collective-consistent afterwards.
  EXPECT_GT(vocab_parallel_cross_entropy(local, targets, vr.start, comm).item(), 0.0);
}

}  // namespace
}  // namespace hp::parallel
