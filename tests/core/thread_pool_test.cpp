#include "hp/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace hp {
namespace {

// Resizing between jobs used to start workers that replayed the last finished job and so counted
// the next job's completion twice: run() then waited forever (CI hit it in
// Matmul.ThreadCountDoesNotChangeBits). Every job after a resize must run each chunk once and
// return only when all chunks are done.
TEST(ThreadPool, ResizeBetweenJobsRunsEachChunkOnceAndReturns) {
  const int saved = num_threads();
  for (int round = 0; round < 300; ++round) {
    set_num_threads(1);
    set_num_threads(2 + round % 3);
    std::vector<std::atomic<int>> hits(8);
    parallel_blocks(8, 1, [&](int64_t b, int64_t, int64_t) {
      if (b == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
      hits[size_t(b)].fetch_add(1);
    });
    for (size_t b = 0; b < hits.size(); ++b) ASSERT_EQ(hits[b].load(), 1) << "round " << round;
  }
  set_num_threads(saved);
}

TEST(ThreadPool, ErrorsFromWorkersReachTheCallerAndThePoolStaysUsable) {
  const int saved = num_threads();
  set_num_threads(2);
  EXPECT_THROW(parallel_blocks(4, 1,
                               [](int64_t b, int64_t, int64_t) {
                                 if (b == 3) throw std::runtime_error("chunk 3");
                               }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  EXPECT_THROW(set_num_threads(0), std::exception);
  set_num_threads(saved);
}

}  // namespace
}  // namespace hp
