// MPI backend internals: the Work handle over MPI requests and the progress thread that drives
// outstanding non-blocking calls while the caller computes.
//
// Two threads touch a work: its owner (the thread that posted it and calls test() / wait()) and the
// progress thread. The progress thread only drives MPI (poll(): MPI_Testall under mu_) and flags
// completion; the owner runs the completion work (finish: division, dtype conversion, their kernels
// and allocations) in its own test() / wait(), so that work never runs beside the owner's compute
// on another thread, and it allocates under the owner's MemTierScope / MemCategoryScope.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hp/dist/communicator.h"

namespace hp::dist::detail {

class MpiWork : public Work {
 public:
  MpiWork(std::string what, double timeout_s)
      : what_(std::move(what)), timeout_s_(timeout_s), start_(std::chrono::steady_clock::now()) {}
  ~MpiWork() override;
  // Owner only. test() polls; on completion it runs finish on the calling thread, once.
  void wait() override;
  bool test() override;
  // Progress thread (and test()): MPI_Testall under mu_; true once the requests completed or MPI
  // failed. Never runs finish, never allocates, never throws.
  bool poll();

  std::vector<MPI_Request> requests;
  // Buffers MPI reads or writes while the call is in flight.
  std::vector<Tensor> keep_alive;
  // Builds the result after completion (trim, average, downcast); runs once, on the owner's thread.
  std::function<Tensor()> finish;
  const std::string& what() const { return what_; }
  // The op of what() ("all_gather"): its name in profiler traces.
  std::string op_name() const;
  // When the call began (profiler::now_ns time base).
  int64_t start_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count();
  }

 private:
  std::string what_;  // "rank 1 of 4: all_gather(bf16 [3, 4])"
  double timeout_s_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;             // requests, complete_ and mpi_rc_ (owner against progress thread)
  bool complete_ = false;     // MPI is done with the requests (and the buffers)
  int mpi_rc_ = MPI_SUCCESS;  // MPI_Testall's failure; fixed once complete_
  bool done_ = false;         // owner only: finish ran (or the failure was recorded)
  std::string error_;         // owner only
};

// Registers w with the progress thread (started on first use when MPI runs multi-threaded).
void progress_add(const std::shared_ptr<MpiWork>& w);
// Stops the progress thread (before MPI_Finalize).
void progress_shutdown();
// Throws CommError naming `what` and MPI's message when rc is not MPI_SUCCESS.
void check_mpi(int rc, const std::string& what);

}  // namespace hp::dist::detail
