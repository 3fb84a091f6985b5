// Backward of every redistribute transition (see the table in hp/shard/dtensor.h), and a
// tensor-parallel MLP (colwise up, rowwise down) equal to the one-rank MLP in forward and
// gradients.
#include <gtest/gtest.h>

#include "hp/ops/ops.h"
#include "hp/shard/dtensor.h"

namespace hp::shard {
namespace {

// Value (owner + 1) for every index of a dim of size n, owner = the rank holding it under chunking.
std::vector<double> owner_plus_one(int64_t n, int64_t w) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < w; ++r)
      if (i >= chunk_range(n, w, r).start &&
          i < chunk_range(n, w, r).start + chunk_range(n, w, r).length)
        v.push_back(static_cast<double>(r + 1));
  return v;
}

struct Case {
  Placements src, dst;
};

// loss = Σ y_local · (rank + 1): gradient of y_local is rank + 1 everywhere.
Tensor grad_through(const MeshPtr& m, const Placements& src, const Placements& dst, bool full) {
  Shape g{7, 3};
  Tensor x = zeros(local_shape(g, *m, src)).requires_grad_();
  DTensor d = DTensor::from_local(x, m, src, g);
  Tensor y = full ? d.full_tensor() : d.redistribute(dst).local();
  sum(y * static_cast<double>(m->coordinate(0) + 1)).backward();
  return x.grad();
}

TEST(DTensorAutograd, EachTransitionBackward) {
  auto m = make_mesh({{"tp", -1}});
  const int64_t w = m->size(0), me = m->coordinate(0);
  const double tri = static_cast<double>(w * (w + 1) / 2);
  // Shard→Replicate: reduce-scatter of the (Partial) gradient: Σ_r (r+1) on my rows.
  EXPECT_EQ(grad_through(m, {Shard{0}}, {Replicate{}}, false).to_vector(),
            std::vector<double>(static_cast<size_t>(chunk_range(7, w, me).length * 3), tri));
  // full_tensor: Replicate gradient, backward slices: (me+1) everywhere.
  EXPECT_EQ(grad_through(m, {Shard{0}}, {}, true).to_vector(),
            std::vector<double>(static_cast<size_t>(chunk_range(7, w, me).length * 3), me + 1.0));
  // Partial→Replicate: identity.
  EXPECT_EQ(grad_through(m, {Partial{}}, {Replicate{}}, false).to_vector(),
            std::vector<double>(21, me + 1.0));
  // Replicate→Shard(0) and Partial→Shard(0): all-gather: row i gets owner(i) + 1.
  std::vector<double> rows;
  for (double v : owner_plus_one(7, w)) rows.insert(rows.end(), 3, v);
  EXPECT_EQ(grad_through(m, {Replicate{}}, {Shard{0}}, false).to_vector(), rows);
  EXPECT_EQ(grad_through(m, {Partial{}}, {Shard{0}}, false).to_vector(), rows);
  // Shard(0)→Shard(1): all-to-all back: column c gets owner(c) + 1 on my rows.
  std::vector<double> cols;
  for (int64_t i = 0; i < chunk_range(7, w, me).length; ++i)
    for (double v : owner_plus_one(3, w)) cols.push_back(v);
  EXPECT_EQ(grad_through(m, {Shard{0}}, {Shard{1}}, false).to_vector(), cols);
  // Replicate with a Partial gradient (Megatron "f"): all-reduce backward.
  Tensor x = zeros({2, 2}).requires_grad_();
  Tensor y = DTensor::from_local(x, m, {Replicate{}}, {2, 2})
                 .redistribute({Replicate{}}, Placements{Partial{}})
                 .local();
  sum(y * static_cast<double>(me + 1)).backward();
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(4, tri));
}

// One-rank reference vs tensor parallel: h = silu(x·W1ᵀ) with W1 [F, D] colwise (Shard(0)),
// y = h·W2ᵀ with W2 [D, F] rowwise (Shard(1)); F = 10 is uneven over 3 and 4 ranks.
TEST(DTensorAutograd, TensorParallelMlpMatchesOneRank) {
  auto m = make_mesh({{"tp", -1}});
  const int64_t D = 6, F = 10, T = 5;
  manual_seed(7);
  Tensor x = randn({T, D}).requires_grad_();
  Tensor w1 = randn({F, D}).requires_grad_();
  Tensor w2 = randn({D, F}).requires_grad_();
  Tensor target = randn({T, D});
  Tensor ref = linear(silu(linear(x, w1)), w2);
  sum(ref * target).backward();

  Tensor xl = x.detach().clone().requires_grad_();
  DTensor w1d = distribute_tensor(w1.detach(), m, {Shard{0}});
  DTensor w2d = distribute_tensor(w2.detach(), m, {Shard{1}});
  Tensor w1l = w1d.local().detach().requires_grad_(), w2l = w2d.local().detach().requires_grad_();
  // Entry: x replicated, its gradient partial per rank (all-reduced in backward).
  Tensor xin = DTensor::from_local(xl, m, {Replicate{}}, {T, D})
                   .redistribute({Replicate{}}, Placements{Partial{}})
                   .local();
  Tensor part = linear(silu(linear(xin, w1l)), w2l);  // Partial(sum) [T, D]
  Tensor y = DTensor::from_local(part, m, {Partial{}}, {T, D}).redistribute({Replicate{}}).local();
  sum(y * target).backward();

  auto near = [](const Tensor& a, const Tensor& b, const char* what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    auto av = a.to_vector(), bv = b.to_vector();
    for (size_t i = 0; i < av.size(); ++i) EXPECT_NEAR(av[i], bv[i], 1e-4) << what << " " << i;
  };
  near(y, ref.detach(), "forward");
  near(xl.grad(), x.grad(), "dx");
  auto r = chunk_range(F, m->size(0), m->coordinate(0));
  near(w1l.grad(), narrow(w1.grad(), 0, r.start, r.length).contiguous(), "dW1");
  near(w2l.grad(), narrow(w2.grad(), 1, r.start, r.length).contiguous(), "dW2");
}

}  // namespace
}  // namespace hp::shard
