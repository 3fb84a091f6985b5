// Communicator: the collective-communication interface every parallel runtime uses
// (docs/ARCHITECTURE.md §3).
//
// Collectives work on dim 0 ("rows") of tensors of any shape; inputs need not be contiguous and are
// never modified; results are new contiguous tensors. Reductions: f32, f64, bf16 and f16 (the
// narrow floats accumulate in f32 and round once, so every rank gets bit-identical results), i32,
// i64, u8. Data movement (gather, all-to-all, broadcast, send/recv) takes any dtype.
//
// Every op has a non-blocking form `i<op>` returning a Work handle; a background progress thread
// drives outstanding requests while the caller computes. Blocking forms are `i<op>(...)->result()`.
// A call that does not complete within timeout_s() (HP_COMM_TIMEOUT_S, default 600 s) throws
// CommError naming the rank and op, so a hung collective becomes an error instead of a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/tensor.h"

namespace hp::dist {

// A failed or timed-out communication call; the message names rank, op and sizes.
class CommError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// Handle of a non-blocking call. wait() blocks until done (or throws CommError on timeout or
// failure); test() polls; result() waits and returns the output (undefined for send/barrier).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  Tensor result() {
    wait();
    return result_;
  }

 protected:
  Tensor result_;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective over this communicator: ranks with the same color form a new communicator, ordered
  // by (key, old rank). color < 0 yields nullptr (the rank joins none).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  // x [n, ...] on every rank → elementwise reduction, [n, ...] on every rank.
  virtual WorkPtr iall_reduce(const Tensor& x, ReduceOp op) = 0;
  // x from `root` on every rank (others pass a tensor of the same shape and dtype).
  virtual WorkPtr ibroadcast(const Tensor& x, int root) = 0;
  // x [n, ...] on every rank → [size·n, ...], rank r's rows at [r·n, (r+1)·n).
  virtual WorkPtr iall_gather(const Tensor& x) = 0;
  // x [counts[rank], ...] → [sum(counts), ...]; counts (rows per rank) are the same on every rank.
  virtual WorkPtr iall_gather_v(const Tensor& x, const std::vector<int64_t>& counts) = 0;
  // x [size·n, ...] → reduction of every rank's rows [rank·n, (rank+1)·n), [n, ...].
  virtual WorkPtr ireduce_scatter(const Tensor& x, ReduceOp op) = 0;
  // x [sum(counts), ...] → this rank's counts[rank] rows of the reduction.
  virtual WorkPtr ireduce_scatter_v(const Tensor& x, const std::vector<int64_t>& counts,
                                    ReduceOp op) = 0;
  // x [size·n, ...]: rows [j·n, (j+1)·n) go to rank j; the result holds rank j's block at j·n.
  virtual WorkPtr iall_to_all(const Tensor& x) = 0;
  // x [sum(send_counts), ...]: send_counts[j] rows go to rank j; the result is [sum(recv_counts),
  // ...] with rank j's rows in order. Counts are rows; the trailing shape must match everywhere.
  virtual WorkPtr iall_to_all_v(const Tensor& x, const std::vector<int64_t>& send_counts,
                                const std::vector<int64_t>& recv_counts) = 0;
  virtual WorkPtr isend(const Tensor& x, int dst, int tag = 0) = 0;
  // Receives into a new tensor of `shape` and `dt` from `src`.
  virtual WorkPtr irecv(const Shape& shape, DType dt, int src, int tag = 0) = 0;
  virtual WorkPtr ibarrier() = 0;

  // Blocking forms.
  Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::sum) {
    return iall_reduce(x, op)->result();
  }
  Tensor broadcast(const Tensor& x, int root) { return ibroadcast(x, root)->result(); }
  Tensor all_gather(const Tensor& x) { return iall_gather(x)->result(); }
  Tensor all_gather_v(const Tensor& x, const std::vector<int64_t>& counts) {
    return iall_gather_v(x, counts)->result();
  }
  Tensor reduce_scatter(const Tensor& x, ReduceOp op = ReduceOp::sum) {
    return ireduce_scatter(x, op)->result();
  }
  Tensor reduce_scatter_v(const Tensor& x, const std::vector<int64_t>& counts,
                          ReduceOp op = ReduceOp::sum) {
    return ireduce_scatter_v(x, counts, op)->result();
  }
  Tensor all_to_all(const Tensor& x) { return iall_to_all(x)->result(); }
  Tensor all_to_all_v(const Tensor& x, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& recv_counts) {
    return iall_to_all_v(x, send_counts, recv_counts)->result();
  }
  void send(const Tensor& x, int dst, int tag = 0) { isend(x, dst, tag)->wait(); }
  Tensor recv(const Shape& shape, DType dt, int src, int tag = 0) {
    return irecv(shape, dt, src, tag)->result();
  }
  void barrier() { ibarrier()->wait(); }

  // Seconds a call may take before it throws CommError (HP_COMM_TIMEOUT_S; inherited by split).
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double s) { timeout_s_ = s; }

 protected:
  double timeout_s_ = 600.0;
};
using CommPtr = std::shared_ptr<Communicator>;

// The world communicator. Initializes MPI on first use (MPI_THREAD_MULTIPLE); a process started
// without mpirun is a world of one. Under mpirun with more than one rank, an uncaught exception
// prints "[comm] rank r: fatal: ..." and aborts the whole job (MPI_Abort) instead of leaving the
// other ranks hanging.
CommPtr world();
// Prints "[comm] rank r: fatal: <message>" to stderr and ends every rank of the job (MPI_Abort).
[[noreturn]] void abort_job(const std::string& message, int code = 1);
// For a rank about to end with an error: whether a normal exit is safe. True when MPI is not
// running or the world has one rank, or when every rank of the world reaches this call within
// grace_s seconds (an error all raised alike, such as a config error: their MPI_Finalize calls
// meet). False when a rank did not come: it is most likely inside a collective waiting for this
// one, and this rank's MPI_Finalize would block until that rank's HP_COMM_TIMEOUT_S ran out, so
// the caller should abort_job. The ranks meet at a barrier on a duplicate of the world made for
// this alone, which no collective of the job can match.
bool peers_end_alike(double grace_s);
// The grace peers_end_alike gets in hp's main: HP_ERROR_GRACE_S (seconds > 0), default 5.
double error_grace_s();
// CPU seconds this process's background progress thread has used since it started (0 before it
// has): what driving outstanding calls costs the compute threads beside it.
double progress_cpu_s();

}  // namespace hp::dist
