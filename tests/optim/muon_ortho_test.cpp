// The sharded-Muon owner rule and the shard-spec errors that need no communication (the sharded
// steps themselves run under mpirun: tests/dist/optim_mpitest.cpp).
#include "hp/optim/muon_ortho.h"

#include <gtest/gtest.h>

namespace hp::optim {
namespace {

TEST(MuonOwners, RoundRobinOverMatricesSortedBySize) {
  // Sorted: 128 (#2), 35 (#0), 24 (#3), 15 (#1), 15 (#4: ties keep index order) → ranks 0,1,2,0,1.
  EXPECT_EQ(muon_owners({35, 15, 128, 24, 15}, 3), (std::vector<int>{1, 0, 0, 2, 1}));
  EXPECT_EQ(muon_owners({35, 15, 128, 24, 15}, 2), (std::vector<int>{1, 1, 0, 0, 0}));
  EXPECT_EQ(muon_owners({35, 15, 128}, 1), (std::vector<int>{0, 0, 0}));
  // More ranks than matrices: the largest goes to rank 0, the rest follow; ranks 2, 3 own none.
  EXPECT_EQ(muon_owners({5, 9}, 4), (std::vector<int>{1, 0}));
  EXPECT_TRUE(muon_owners({}, 3).empty());
}

TEST(MuonOwners, BalancesCountsAcrossRanks) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 10; ++i) sizes.push_back((i * 37) % 11 + 1);
  std::vector<int> per_rank(4, 0);
  for (int o : muon_owners(sizes, 4)) {
    ASSERT_GE(o, 0);
    ASSERT_LT(o, 4);
    ++per_rank[static_cast<size_t>(o)];
  }
  EXPECT_EQ(per_rank, (std::vector<int>{3, 3, 2, 2}));
}

TEST(ShardSpec, ErrorsWithoutCommunicationNameTheParameter) {
  std::vector<NamedTensor> params = {{"w", zeros({4, 3})}};
  try {
    Optimizer({params}, {}, {{"v", ShardSpec{{8, 3}, {0, 0}, nullptr}}});
    FAIL() << "unknown FQN accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[optim] shard spec for unknown parameter 'v'"),
              std::string::npos)
        << e.what();
  }
  try {
    Optimizer({params}, {}, {{"w", ShardSpec{{8, 3}, {0, 0}, nullptr}}});
    FAIL() << "null communicator accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("w: shard spec without a communicator"), std::string::npos)
        << e.what();
  }
}

TEST(ShardSpec, RowShardStartsAtItsRowOnDimZero) {
  const ShardSpec s = row_shard({8, 3, 2}, 5, nullptr);
  EXPECT_EQ(s.global_shape, (Shape{8, 3, 2}));
  EXPECT_EQ(s.offsets, (std::vector<int64_t>{5, 0, 0}));
  EXPECT_EQ(row_shard({}, 0, nullptr).offsets, std::vector<int64_t>{});
}

}  // namespace
}  // namespace hp::optim
