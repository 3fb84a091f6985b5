// MPI backend internals: the Work handle over MPI requests and the progress thread that drives
// outstanding non-blocking calls while the caller computes.
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
  void wait() override;
  bool test() override;

  std::vector<MPI_Request> requests;
  // Buffers MPI reads or writes while the call is in flight.
  std::vector<Tensor> keep_alive;
  // Builds the result after completion (trim, average, downcast); runs once.
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
  std::mutex mu_;
  bool done_ = false;
  std::string error_;
};

// Registers w with the progress thread (started on first use when MPI runs multi-threaded).
void progress_add(const std::shared_ptr<MpiWork>& w);
// Stops the progress thread (before MPI_Finalize).
void progress_shutdown();
// Throws CommError naming `what` and MPI's message when rc is not MPI_SUCCESS.
void check_mpi(int rc, const std::string& what);

}  // namespace hp::dist::detail
