// MPI backend of Communicator (OpenMPI): every op is an MPI_I* call wrapped in an MpiWork.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "hp/core/profiler.h"
#include "hp/dist/communicator.h"
#include "hp/dist/mpi/mpi_work.h"

namespace hp::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

namespace detail {
namespace {

// Element type for data movement: any dtype, moved as its bits.
MPI_Datatype move_type(DType dt) {
  switch (dtype_size(dt)) {
    case 8:
      return MPI_UINT64_T;
    case 4:
      return MPI_UINT32_T;
    case 2:
      return MPI_UINT16_T;
    default:
      return MPI_UINT8_T;
  }
}

// The dtype a reduction runs in: narrow floats accumulate in f32.
DType reduce_dtype(DType dt) {
  return dt == DType::bf16 || dt == DType::f16 ? DType::f32 : dt;
}

MPI_Datatype reduce_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
    default:
      return MPI_SUM;
  }
}

// In-place x /= n for the avg reduction (f32/f64 only).
void divide_(const Tensor& x, int n) {
  if (x.dtype() == DType::f32) {
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] /= static_cast<float>(n);
  } else {
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] /= n;
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, double timeout_s) : comm_(comm), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    timeout_s_ = timeout_s;
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  CommPtr split(int color, int key) override {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out),
              where("split(color " + std::to_string(color) + ", key " + std::to_string(key) + ")"));
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_shared<MpiCommunicator>(out, true, timeout_s_);
  }

  WorkPtr iall_reduce(const Tensor& x, ReduceOp op) override {
    auto w = start("all_reduce", x, op);
    Tensor buf = x.to(reduce_dtype(x.dtype()));
    w->requests.resize(1);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), count(buf.numel(), *w),
                             reduce_type(buf.dtype()), mpi_op(op), comm_, &w->requests[0]),
              w->what());
    return launch(w, {buf}, finisher(buf, op, x.dtype()));
  }

  WorkPtr ibroadcast(const Tensor& x, int root) override {
    auto w = start("broadcast(root " + std::to_string(root) + ")", x);
    check_peer(root, *w);
    Tensor buf = x.clone();
    w->requests.resize(1);
    check_mpi(MPI_Ibcast(buf.raw_data(), count(buf.numel(), *w), move_type(x.dtype()), root, comm_,
                         &w->requests[0]),
              w->what());
    return launch(w, {buf}, [buf] { return buf; });
  }

  WorkPtr iall_gather(const Tensor& x) override {
    return iall_gather_v(x,
                         std::vector<int64_t>(static_cast<size_t>(size_), rows(x, "all_gather")));
  }

  WorkPtr iall_gather_v(const Tensor& x, const std::vector<int64_t>& counts) override {
    auto w = start("all_gather", x);
    check_counts(counts, rows(x, "all_gather"), at(counts), "counts", *w);
    Tensor in = x.contiguous();
    Tensor out = empty(with_rows(x, sum(counts)), x.dtype());
    auto [cnt, disp] = elements(counts, row_numel(x), *w);
    w->requests.resize(1);
    check_mpi(
        MPI_Iallgatherv(in.raw_data(), cnt[rank_], move_type(x.dtype()), out.raw_data(), cnt.data(),
                        disp.data(), move_type(x.dtype()), comm_, &w->requests[0]),
        w->what());
    return launch(w, {in, out}, [out] { return out; });
  }

  WorkPtr ireduce_scatter(const Tensor& x, ReduceOp op) override {
    int64_t n = rows(x, "reduce_scatter");
    if (n % size_ != 0)
      HP_THROW(ValueError, "comm", "rank ", rank_, " of ", size_, ": reduce_scatter(", x.desc(),
               "): ", n, " rows do not divide by ", size_, " ranks (use reduce_scatter_v)");
    return ireduce_scatter_v(x, std::vector<int64_t>(static_cast<size_t>(size_), n / size_), op);
  }

  WorkPtr ireduce_scatter_v(const Tensor& x, const std::vector<int64_t>& counts,
                            ReduceOp op) override {
    auto w = start("reduce_scatter", x, op);
    check_counts(counts, rows(x, "reduce_scatter"), sum(counts), "counts", *w);
    Tensor in = x.to(reduce_dtype(x.dtype()));
    Tensor out = empty(with_rows(x, at(counts)), in.dtype());
    auto [cnt, disp] = elements(counts, row_numel(x), *w);
    w->requests.resize(1);
    check_mpi(MPI_Ireduce_scatter(in.raw_data(), out.raw_data(), cnt.data(),
                                  reduce_type(in.dtype()), mpi_op(op), comm_, &w->requests[0]),
              w->what());
    return launch(w, {in, out}, finisher(out, op, x.dtype()));
  }

  WorkPtr iall_to_all(const Tensor& x) override {
    int64_t n = rows(x, "all_to_all");
    if (n % size_ != 0)
      HP_THROW(ValueError, "comm", "rank ", rank_, " of ", size_, ": all_to_all(", x.desc(),
               "): ", n, " rows do not divide by ", size_, " ranks (use all_to_all_v)");
    std::vector<int64_t> c(static_cast<size_t>(size_), n / size_);
    return iall_to_all_v(x, c, c);
  }

  WorkPtr iall_to_all_v(const Tensor& x, const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& recv_counts) override {
    auto w = start("all_to_all", x);
    check_counts(send_counts, rows(x, "all_to_all"), sum(send_counts), "send_counts", *w);
    check_counts(recv_counts, 0, 0, "recv_counts", *w);
    Tensor in = x.contiguous();
    Tensor out = empty(with_rows(x, sum(recv_counts)), x.dtype());
    auto [scnt, sdisp] = elements(send_counts, row_numel(x), *w);
    auto [rcnt, rdisp] = elements(recv_counts, row_numel(x), *w);
    w->requests.resize(1);
    MPI_Datatype t = move_type(x.dtype());
    check_mpi(MPI_Ialltoallv(in.raw_data(), scnt.data(), sdisp.data(), t, out.raw_data(),
                             rcnt.data(), rdisp.data(), t, comm_, &w->requests[0]),
              w->what());
    return launch(w, {in, out}, [out] { return out; });
  }

  WorkPtr isend(const Tensor& x, int dst, int tag) override {
    auto w = start("send(to " + std::to_string(dst) + ", tag " + std::to_string(tag) + ")", x);
    check_peer(dst, *w);
    Tensor in = x.contiguous();
    w->requests.resize(1);
    check_mpi(MPI_Isend(in.raw_data(), count(in.numel(), *w), move_type(x.dtype()), dst, tag, comm_,
                        &w->requests[0]),
              w->what());
    return launch(w, {in}, nullptr);
  }

  WorkPtr irecv(const Shape& shape, DType dt, int src, int tag) override {
    Tensor out = empty(shape, dt);
    auto w = start("recv(from " + std::to_string(src) + ", tag " + std::to_string(tag) + ")", out);
    check_peer(src, *w);
    w->requests.resize(1);
    check_mpi(MPI_Irecv(out.raw_data(), count(out.numel(), *w), move_type(dt), src, tag, comm_,
                        &w->requests[0]),
              w->what());
    return launch(w, {out}, [out] { return out; });
  }

  WorkPtr ibarrier() override {
    auto w = std::make_shared<MpiWork>(where("barrier"), timeout_s_);
    w->requests.resize(1);
    check_mpi(MPI_Ibarrier(comm_, &w->requests[0]), w->what());
    return launch(w, {}, nullptr);
  }

 private:
  std::string where(const std::string& op) const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + op;
  }

  std::shared_ptr<MpiWork> start(const std::string& op, const Tensor& x) {
    return std::make_shared<MpiWork>(where(op + "(" + x.desc() + ")"), timeout_s_);
  }

  std::shared_ptr<MpiWork> start(const std::string& op, const Tensor& x, ReduceOp rop) {
    DType rdt = reduce_dtype(x.dtype());
    if (reduce_type(rdt) == MPI_DATATYPE_NULL ||
        (rop == ReduceOp::avg && rdt != DType::f32 && rdt != DType::f64))
      HP_THROW(ValueError, "comm", where(op), ": reduction ", reduce_op_name(rop), " on ",
               dtype_name(x.dtype()),
               " is not supported (f32, f64, bf16, f16, i32, i64, u8; avg "
               "needs a floating dtype)");
    return std::make_shared<MpiWork>(where(op + "(" + x.desc() + ", " + reduce_op_name(rop) + ")"),
                                     timeout_s_);
  }

  // Divides for avg and rounds back to the caller's dtype after the reduction completes.
  std::function<Tensor()> finisher(const Tensor& buf, ReduceOp op, DType out_dt) {
    int n = size_;
    return [buf, op, out_dt, n] {
      if (op == ReduceOp::avg) divide_(buf, n);
      return buf.dtype() == out_dt ? buf : buf.to(out_dt);
    };
  }

  WorkPtr launch(const std::shared_ptr<MpiWork>& w, std::vector<Tensor> keep,
                 std::function<Tensor()> finish) {
    w->keep_alive = std::move(keep);
    w->finish = std::move(finish);
    progress_add(w);
    // The call itself (argument checks, staging casts, MPI_I*) as one event; its wait is another.
    if (profiler::recording())
      profiler::record(profiler::Category::comm, profiler::intern(w->op_name()), w->start_ns(),
                       profiler::now_ns());
    return w;
  }

  int64_t rows(const Tensor& x, const char* op) const {
    if (x.dim() == 0)
      HP_THROW(ValueError, "comm", where(op), ": needs a tensor with at least one dim, got ",
               x.desc());
    return x.size(0);
  }
  static int64_t row_numel(const Tensor& x) {
    int64_t n = 1;
    for (int64_t d = 1; d < x.dim(); ++d) n *= x.size(d);
    return n;
  }
  static Shape with_rows(const Tensor& x, int64_t rows) {
    Shape s = x.shape();
    s[0] = rows;
    return s;
  }
  // This rank's entry, or -1 when counts has the wrong length (reported by check_counts).
  int64_t at(const std::vector<int64_t>& counts) const {
    return static_cast<int>(counts.size()) == size_ ? counts[static_cast<size_t>(rank_)] : -1;
  }
  static int64_t sum(const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), int64_t{0});
  }

  int count(int64_t n, const MpiWork& w) const {
    if (n > INT_MAX)
      HP_THROW(ValueError, "comm", w.what(), ": ", n, " elements exceed MPI's int count limit");
    return static_cast<int>(n);
  }
  void check_peer(int peer, const MpiWork& w) const {
    if (peer < 0 || peer >= size_)
      HP_THROW(ValueError, "comm", w.what(), ": peer rank ", peer, " outside [0, ", size_, ")");
  }
  // counts must have one entry per rank, none negative, and the entry `got` must equal `want`.
  void check_counts(const std::vector<int64_t>& counts, int64_t want, int64_t got, const char* name,
                    const MpiWork& w) const {
    bool ok = static_cast<int>(counts.size()) == size_;
    for (int64_t c : counts) ok = ok && c >= 0;
    if (!ok || want != got)
      HP_THROW(ValueError, "comm", w.what(), ": ", name, " (", counts.size(),
               " entries) must have one non-negative row count per rank (", size_,
               ") matching the input's ", want, " rows");
  }
  std::pair<std::vector<int>, std::vector<int>> elements(const std::vector<int64_t>& counts,
                                                         int64_t row_numel,
                                                         const MpiWork& w) const {
    std::vector<int> cnt(counts.size()), disp(counts.size());
    int64_t off = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      cnt[i] = count(counts[i] * row_numel, w);
      disp[i] = count(off, w);
      off += counts[i] * row_numel;
    }
    return {cnt, disp};
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

// peers_end_alike's communicator: a duplicate of the world (set by world() when it has more than
// one rank), so its barrier never matches a collective the other ranks are inside.
CommPtr& exit_comm() {
  static CommPtr c;
  return c;
}

void finalize_at_exit() {
  progress_shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void terminate_with_abort() {
  std::string msg = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      msg = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      msg = "uncaught non-standard exception";
    }
  }
  abort_job(msg);
}

}  // namespace
}  // namespace detail

CommPtr world() {
  static std::once_flag once;
  static CommPtr w;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      detail::check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                        "MPI_Init_thread");
      std::atexit(detail::finalize_at_exit);
    }
    double timeout = 600.0;
    if (const char* env = std::getenv("HP_COMM_TIMEOUT_S")) timeout = std::atof(env);
    if (timeout <= 0)
      HP_THROW(ValueError, "comm", "HP_COMM_TIMEOUT_S must be > 0, got '",
               std::getenv("HP_COMM_TIMEOUT_S"), "'");
    w = std::make_shared<detail::MpiCommunicator>(MPI_COMM_WORLD, false, timeout);
    if (w->size() > 1) {
      std::set_terminate(detail::terminate_with_abort);
      MPI_Comm dup = MPI_COMM_NULL;
      detail::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup(MPI_COMM_WORLD)");
      detail::exit_comm() = std::make_shared<detail::MpiCommunicator>(dup, true, timeout);
    }
  });
  return w;
}

void abort_job(const std::string& message, int code) {
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "[comm] rank %d: fatal: %s; aborting the job\n", rank, message.c_str());
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

bool peers_end_alike(double grace_s) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return true;
  const CommPtr& comm = detail::exit_comm();
  if (!comm) return true;  // world() made a world of one (or was never asked for)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  try {
    const WorkPtr met = comm->ibarrier();
    while (!met->test()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  } catch (const Error&) {  // MPI failed under the barrier: the peers cannot be counted on
    return false;
  }
}

double error_grace_s() {
  const char* env = std::getenv("HP_ERROR_GRACE_S");
  if (!env) return 5.0;
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  // A bad value must not hide the error being reported: the default, with a note.
  if (*env == '\0' || *end != '\0' || !(s > 0)) {
    std::fprintf(stderr, "[comm] HP_ERROR_GRACE_S must be seconds > 0, got '%s'; using 5\n", env);
    return 5.0;
  }
  return s;
}

}  // namespace hp::dist
