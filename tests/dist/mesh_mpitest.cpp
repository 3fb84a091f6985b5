// DeviceMesh: degrees, inference, coordinates, axis communicators, sub-meshes, bad degrees.
#include <gtest/gtest.h>

#include "hp/shard/mesh.h"

namespace hp::shard {
namespace {

TEST(Mesh, InfersDegreeAndLaysOutRowMajor) {
  auto w = dist::world();
  int64_t tp = w->size() % 2 == 0 ? 2 : 1;
  auto m = make_mesh({{"dp_shard", -1}, {"tp", tp}});
  EXPECT_EQ(m->shape(), (std::vector<int64_t>{w->size() / tp, tp}));
  EXPECT_EQ(m->coordinate(0), w->rank() / tp);
  EXPECT_EQ(m->coordinate(1), w->rank() % tp);
  EXPECT_EQ(m->axis_comm("tp")->size(), tp);
  EXPECT_EQ(m->axis_comm("tp")->rank(), m->coordinate(1));
  EXPECT_EQ(m->axis_comm("dp_shard")->rank(), m->coordinate(0));
  // The tp group holds consecutive ranks.
  Tensor peers = m->axis_comm("tp")->all_gather(from_data<int32_t>({w->rank()}, {1}));
  for (int64_t k = 0; k < tp; ++k) EXPECT_EQ(peers.to_vector()[k], w->rank() / tp * tp + k);
  auto sub = m->sub_mesh({"tp"});
  EXPECT_EQ(sub->shape(), (std::vector<int64_t>{tp}));
  EXPECT_EQ(sub->coordinate(0), m->coordinate(1));
  EXPECT_EQ(m->str(), "DeviceMesh(dp_shard=" + std::to_string(w->size() / tp) +
                          ", tp=" + std::to_string(tp) + ")");
}

TEST(Mesh, BadDegreesFailOnEveryRank) {
  auto w = dist::world();
  try {
    make_mesh({{"dp_shard", 2}, {"tp", w->size()}});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[mesh] degrees (dp_shard=2, tp=" + std::to_string(w->size()) +
                       ") multiply to " + std::to_string(2 * w->size()) +
                       " but the world size is " + std::to_string(w->size())),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(make_mesh({{"tp", -1}, {"tp", 1}}), ValueError);
  EXPECT_THROW(make_mesh({{"a", -1}, {"b", -1}}), ValueError);
  if (w->size() % 2) {
    EXPECT_THROW(make_mesh({{"a", -1}, {"b", 2}}), ValueError);
  }
  EXPECT_THROW(make_mesh({{"tp", -1}})->axis("cp"), ValueError);
}

}  // namespace
}  // namespace hp::shard
