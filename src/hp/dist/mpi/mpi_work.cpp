#include "hp/dist/mpi/mpi_work.h"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <ctime>
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
  // are deliberately leaked rather than freed under it. (The last owner of a work is the only
  // thread left touching it: complete_ needs no lock here.)
  if (!complete_ && !keep_alive.empty()) new std::vector<Tensor>(std::move(keep_alive));
}

bool MpiWork::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!complete_) {
    int flag = 0;
    mpi_rc_ =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
    complete_ = mpi_rc_ != MPI_SUCCESS || flag != 0;
  }
  return complete_;
}

bool MpiWork::test() {
  if (!done_) {
    if (!poll()) return false;
    // complete_ is set: mpi_rc_ no longer changes, and MPI no longer touches the buffers.
    try {
      check_mpi(mpi_rc_, what_);
      if (finish) result_ = finish();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    finish = nullptr;  // drops the buffers it holds
    keep_alive.clear();
    done_ = true;
  }
  if (!error_.empty()) throw CommError(error_);
  return true;
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
  // The timeout counts the time blocked here, not since the call was posted: a receive posted
  // ahead (the pipeline posts a step's receives at its start) is not late until someone waits.
  const auto begin = std::chrono::steady_clock::now();
  while (!test()) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (s > timeout_s_)
      HP_THROW(CommError, "comm", what_, " timed out after ", timeout_s_,
               " s (HP_COMM_TIMEOUT_S): a peer rank failed or called a different collective");
    std::this_thread::yield();
  }
}

namespace {

// One thread per process polls outstanding non-blocking calls while their callers compute:
// MPI_Testall drives OpenMPI's non-blocking collective schedules and the rendezvous of messages
// above the eager limit. A poll costs about 13 µs of CPU (mostly the wake-up itself: measured with
// one receive outstanding), which the compute threads need when ranks fill the cores, and a
// receive posted ahead (the pipeline's) can stay outstanding for a whole step. So the period
// adapts: kMinPeriod right after a call is posted (its rendezvous or its collective's first rounds
// are then due), four times longer after each poll, up to kMaxPeriod: 50, 200, 800, 3200 µs, i.e.
// 4 wake-ups per post, then ~300 a second (0.4% of a core). A completion does not shorten it: the
// calls that follow one are posts. A caller blocked in wait() polls its own call (MpiWork::wait),
// so the long period never delays a rank that is blocked anyway. It does delay the other side of
// a send: above the eager limit (4 KB in shared memory), once the receiver has matched the message
// the sender must enter MPI again to copy the rest, and a receiver blocked in wait() cannot do that
// for it. So while a send is outstanding the period stops at kSendPeriod (~3% of a core while it
// lasts; a pipeline's send lasts until the receiver's next action boundary).
class Progress {
 public:
  static constexpr std::chrono::microseconds kMinPeriod{50}, kMaxPeriod{3200}, kSendPeriod{400};

  void add(const std::shared_ptr<MpiWork>& w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    pending_.push_back({w, w->op_name() == "send"});
    posted_ = true;
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
  double cpu_s() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return 0;
    clockid_t clock;
    timespec ts{};
    if (pthread_getcpuclockid(thread_.native_handle(), &clock) != 0 ||
        clock_gettime(clock, &ts) != 0)
      return 0;
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }

 private:
  void loop() {
    std::chrono::microseconds period = kMinPeriod;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      const bool fresh = posted_;  // woken by a post: the fast periods start again
      posted_ = false;
      std::vector<Pending> batch;
      batch.swap(pending_);
      lock.unlock();
      std::vector<Pending> still;
      bool sending = false;
      for (Pending& p : batch) {
        auto w = p.work.lock();
        if (!w) continue;  // dropped by its owner (after a timeout): nothing to drive
        // Drives MPI only: the owner's test() / wait() runs the completion work and rethrows a
        // failure. (Should the owner drop the work meanwhile, its buffers are freed here, when w
        // goes: the allocator is thread-safe, and that is all the progress thread then runs.)
        if (!w->poll()) {
          still.push_back(p);
          sending = sending || p.send;
        }
      }
      lock.lock();
      pending_.insert(pending_.end(), still.begin(), still.end());
      period = fresh ? kMinPeriod : std::min(4 * period, sending ? kSendPeriod : kMaxPeriod);
      // Sleeps the period, or until a call is posted (add() notifies) or shutdown.
      cv_.wait_for(lock, period, [&] { return stop_ || posted_; });
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  struct Pending {
    std::weak_ptr<MpiWork> work;
    bool send = false;  // a send's rendezvous moves only when this rank polls
  };
  std::vector<Pending> pending_;
  std::thread thread_;
  bool stop_ = false;
  bool posted_ = false;  // add() since the last poll began
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

namespace hp::dist {

double progress_cpu_s() {
  return detail::progress().cpu_s();
}

}  // namespace hp::dist
