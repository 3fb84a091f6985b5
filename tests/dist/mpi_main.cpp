// main() of hp_test_dist_mpi: every rank runs every test; rank 0 prints the usual report, other
// ranks print only their failures (prefixed "[rank r]"); the process fails when any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "hp/dist/communicator.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto world = hp::dist::world();
  if (world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world->rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  auto flags = world->all_gather(hp::from_data<int32_t>({failed}, {1}));
  int any = 0;
  for (int r = 0; r < world->size(); ++r)
    if (flags.data<int32_t>()[r]) {
      any = 1;
      if (world->rank() == 0) std::fprintf(stderr, "[dist] tests failed on rank %d\n", r);
    }
  return any;
}
