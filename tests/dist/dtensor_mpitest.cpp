// DTensor redistribution: every pair of layouts on a 1-d and a 2-d mesh with uneven and empty
// shards, checked against the global reference; sharded random init; bad input.
#include <gtest/gtest.h>

#include "hp/ops/ops.h"
#include "hp/shard/dtensor.h"

namespace hp::shard {
namespace {

using dist::ReduceOp;

// [r, c] with small exact integers.
Tensor reference(const Shape& s) {
  std::vector<double> v;
  for (int64_t i = 0; i < shape_numel(s); ++i) v.push_back(static_cast<double>((i * 7) % 23) - 11);
  return from_vector(v, s);
}

// This rank's block of g under placements (Partial axes: whole).
Tensor block(const Tensor& g, const DeviceMesh& m, const Placements& p) {
  Shape off = local_offsets(g.shape(), m, p), len = local_shape(g.shape(), m, p);
  Tensor t = g;
  for (int64_t d = 0; d < g.dim(); ++d) t = narrow(t, d, off[d], len[d]);
  return t.contiguous();
}

// A local tensor holding this rank's term of g under p: Partial(sum) splits into exact terms.
Tensor make_local(const Tensor& g, const DeviceMesh& m, const Placements& p) {
  Tensor t = block(g, m, p);
  for (size_t a = 0; a < p.size(); ++a) {
    if (!is_partial(p[a])) continue;
    int64_t w = m.size(a), c = m.coordinate(a);
    ReduceOp op = std::get<Partial>(p[a]).op;
    if (op == ReduceOp::sum) t = c == 0 ? t - (w - 1) * 3.0 : full(t.shape(), 3.0);
    if (op == ReduceOp::max) t = c == 0 ? t : t - 100.0;
  }
  return t;
}

std::vector<Placement> options() {
  return {Shard{0},
          Shard{1},
          Replicate{},
          Partial{ReduceOp::sum},
          Partial{ReduceOp::max},
          Partial{ReduceOp::avg}};
}

// On a 2-d mesh, Partial(sum) stands for every reduce op: the ops themselves are covered pair by
// pair on the 1-d mesh, and the full 6×6-per-axis product (~1,150 pairs) costs a minute at 4 ranks.
std::vector<Placement> options_2d() { return {Shard{0}, Shard{1}, Replicate{}, Partial{ReduceOp::sum}}; }

void check_all_pairs(const MeshPtr& m, const Shape& shape, bool two_d) {
  Tensor g = reference(shape);
  std::vector<Placements> layouts;
  for (const auto& a : two_d ? options_2d() : options()) {
    if (!two_d) {
      layouts.push_back({a});
      continue;
    }
    for (const auto& b : options_2d())
      if (!(is_shard(a) && a == b)) layouts.push_back({a, b});
  }
  for (const auto& src : layouts)
    for (const auto& dst : layouts) {
      DTensor x = DTensor::from_local(make_local(g, *m, src), m, src, shape);
      DTensor y = x.redistribute(dst);
      std::string what =
          placements_str(src) + " -> " + placements_str(dst) + " " + shape_str(shape);
      ASSERT_EQ(y.local().shape(), local_shape(shape, *m, dst)) << what;
      bool any_partial = false;
      for (const auto& p : dst) any_partial = any_partial || is_partial(p);
      if (!any_partial) {
        EXPECT_EQ(y.local().to_vector(), block(g, *m, dst).to_vector()) << what;
      }
      EXPECT_EQ(y.full_tensor().to_vector(), g.to_vector()) << what;
    }
}

TEST(DTensor, ChunkRule) {
  std::vector<int64_t> got;
  for (int r = 0; r < 4; ++r) got.push_back(chunk_range(7, 4, r).length);
  EXPECT_EQ(got, (std::vector<int64_t>{2, 2, 2, 1}));
  got.clear();
  for (int r = 0; r < 4; ++r) got.push_back(chunk_range(5, 4, r).length);
  EXPECT_EQ(got, (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(chunk_range(5, 4, 3).start, 5);
}

TEST(DTensor, EveryPairOneDimMeshUneven) {
  auto m = make_mesh({{"tp", -1}});
  check_all_pairs(m, {7, 5}, false);
  check_all_pairs(m, {2, 3}, false);  // empty shards from 3 ranks on
}

TEST(DTensor, EveryPairTwoDimMesh) {
  auto w = dist::world();
  auto m = make_mesh({{"dp_shard", -1}, {"tp", w->size() % 2 == 0 ? 2 : 1}});
  check_all_pairs(m, {5, 3}, true);
}

TEST(DTensor, FromLocalInfersGlobalShape) {
  auto m = make_mesh({{"tp", -1}});
  Tensor g = reference({7, 2});
  DTensor x = DTensor::from_local(block(g, *m, {Shard{0}}), m, {Shard{0}});
  EXPECT_EQ(x.global_shape(), (Shape{7, 2}));
  EXPECT_EQ(distribute_tensor(g, m, {Shard{1}}).full_tensor().to_vector(), g.to_vector());
}

TEST(DTensor, ShardedRandomInitEqualsUnsharded) {
  auto w = dist::world();
  auto m = make_mesh({{"dp_shard", -1}, {"tp", w->size() % 2 == 0 ? 2 : 1}});
  for (Placements p : {Placements{Shard{0}, Shard{1}}, Placements{Replicate{}, Shard{1}},
                       Placements{Shard{1}, Replicate{}}}) {
    manual_seed(42);
    Tensor ref = randn({7, 5});
    Tensor ref_u = rand({3, 9});
    manual_seed(42);
    DTensor x = dtensor_randn({7, 5}, m, p);
    DTensor u = dtensor_rand({3, 9}, m, p);
    EXPECT_EQ(x.full_tensor().to_vector(), ref.to_vector()) << placements_str(p);
    EXPECT_EQ(u.full_tensor().to_vector(), ref_u.to_vector()) << placements_str(p);
  }
}

TEST(DTensor, BadInputFailsOnEveryRank) {
  auto w = dist::world();
  auto m = make_mesh({{"tp", -1}});
  try {
    DTensor::from_local(zeros({2, 2}), m, {Shard{2}}, {2, 2});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Shard(2) on mesh axis 'tp' names a missing dim"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(DTensor::from_local(zeros({2, 2}), m, {Replicate{}, Replicate{}}), ValueError);
  // Rank 0 disagrees about the global shape.
  Shape gs = w->rank() == 0 ? Shape{4, 3} : Shape{4, 2};
  try {
    DTensor::from_local(zeros(gs), m, {Replicate{}}, gs);
    if (w->size() > 1) FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("global shapes differ across ranks"), std::string::npos);
  }
  // The last rank's local shape does not fit.
  Shape mine = local_shape({9, 2}, *m, {Shard{0}});
  if (w->rank() == w->size() - 1) mine[0] += 1;
  try {
    DTensor::from_local(zeros(mine), m, {Shard{0}}, {9, 2});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(w->size() - 1) +
                                         "'s local shape does not fit global shape [9, 2]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hp::shard
