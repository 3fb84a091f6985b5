#include "hp/dist/mpi/mpi_work.h"

#include <condition_variable>
#include <thread>

#include "hp/core/profiler.h"

namespace hp::dist::detail {

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  HP_THROW(CommError, "comm", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

MpiWork::~MpiWork() {
  // A call that timed out may still be in flight: MPI could write into its buffers later, so they
  // are deliberately leaked rather than freed under it.
  if (!done_ && !keep_alive.empty()) new std::vector<Tensor>(std::move(keep_alive));
}

bool MpiWork::test() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) {
    int flag = 0;
    int rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      try {
        check_mpi(rc, what_);
      } catch (const CommError& e) {
        error_ = e.what();
      }
      done_ = true;
    } else if (flag) {
      try {
        if (finish) result_ = finish();
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      keep_alive.clear();
      done_ = true;
    }
  }
  if (!error_.empty()) throw CommError(error_);
  return done_;
}

std::string MpiWork::op_name() const {
  // what_: "rank 1 of 4: all_gather(bf16 [3, 4])", "rank 0 of 2: barrier".
  const size_t colon = what_.find(": ");
  const size_t begin = colon == std::string::npos ? 0 : colon + 2;
  const size_t end = what_.find('(', begin);
  return what_.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

void MpiWork::wait() {
  // The time the caller is blocked: the exposed part of the collective.
  const profiler::Scope scope(profiler::Category::comm, [this] { return "wait " + op_name(); });
  while (!test()) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s > timeout_s_)
      HP_THROW(CommError, "comm", what_, " timed out after ", timeout_s_,
               " s (HP_COMM_TIMEOUT_S): a peer rank failed or called a different collective");
    std::this_thread::yield();
  }
}

namespace {

// One thread per process polls outstanding non-blocking calls (MPI_Testall drives OpenMPI's
// non-blocking collective schedules), sleeping between rounds so it costs little CPU.
class Progress {
 public:
  void add(const std::shared_ptr<MpiWork>& w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    pending_.push_back(w);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    cv_.notify_one();
  }
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    for (;;) {
      std::vector<std::weak_ptr<MpiWork>> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (stop_) return;
        batch.swap(pending_);
      }
      std::vector<std::weak_ptr<MpiWork>> still;
      for (auto& weak : batch) {
        auto w = weak.lock();
        if (!w) continue;
        bool done = true;
        try {
          done = w->test();
        } catch (...) {
          // The error is kept in the work and rethrown by its owner's wait().
        }
        if (!done) still.push_back(weak);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        pending_.insert(pending_.end(), still.begin(), still.end());
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<MpiWork>> pending_;
  std::thread thread_;
  bool stop_ = false;
};

Progress& progress() {
  static Progress* p = new Progress();  // leaked: must outlive static destructors that use MPI
  return *p;
}

}  // namespace

void progress_add(const std::shared_ptr<MpiWork>& w) {
  int level = 0;
  MPI_Query_thread(&level);
  if (level == MPI_THREAD_MULTIPLE) progress().add(w);
}

void progress_shutdown() {
  progress().shutdown();
}

}  // namespace hp::dist::detail
