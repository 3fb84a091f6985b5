#include "hp/core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hp/core/error.h"

namespace hp {
namespace {

int default_threads() {
  if (const char* env = std::getenv("HP_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > 1024)
      HP_THROW(ValueError, "threads", "HP_NUM_THREADS='", env,
               "' is not an integer in [1, 1024]");
    return static_cast<int>(v);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

thread_local bool t_in_parallel = false;

// Workers sleep on a condition variable between jobs; a job is a chunk counter that every thread
// (the caller included) pulls from until exhausted.
class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  int size() const { return size_; }

  void resize(int n) {
    stop();
    start(n);
  }

  void run(int64_t num_chunks, FunctionRef<void(int64_t)> chunk_fn) {
    if (size_ == 1 || num_chunks == 1 || t_in_parallel) {
      for (int64_t c = 0; c < num_chunks; ++c) chunk_fn(c);
      return;
    }
    std::unique_lock<std::mutex> job_lock(job_mutex_);  // one job at a time
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &chunk_fn;
      num_chunks_ = num_chunks;
      next_.store(0);
      pending_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void start(int n) {
    size_ = std::max(1, n);
    quit_ = false;
    // A new worker starts from the current generation: starting from 0 would make it run a
    // finished job once more and decrement pending_ of the next job twice, so run() would wait
    // for a count that went past zero (a hang seen after set_num_threads in CI).
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, g = generation_] { loop(g); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  void work() {
    t_in_parallel = true;
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= num_chunks_) break;
      try {
        (*job_)(c);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    t_in_parallel = false;
  }

  void loop(uint64_t seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
      }
      work();
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--pending_ == 0) done_cv_.notify_one();
      }
    }
  }

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const FunctionRef<void(int64_t)>* job_ = nullptr;
  int64_t num_chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool quit_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  if (n < 1) HP_THROW(ValueError, "threads", "thread count must be >= 1, got ", n);
  pool().resize(n);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  FunctionRef<void(int64_t, int64_t)> fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(max_chunks, pool().size());
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  const int64_t per = (n + chunks - 1) / chunks;
  pool().run(chunks, [&](int64_t c) {
    int64_t b = begin + c * per;
    int64_t e = std::min(end, b + per);
    if (b < e) fn(b, e);
  });
}

int64_t num_blocks(int64_t n, int64_t block) {
  HP_CHECK(block > 0);
  return n <= 0 ? 0 : (n + block - 1) / block;
}

void parallel_blocks(int64_t n, int64_t block,
                     FunctionRef<void(int64_t, int64_t, int64_t)> fn) {
  const int64_t nb = num_blocks(n, block);
  if (nb == 0) return;
  if (nb == 1) {
    fn(0, 0, n);
    return;
  }
  pool().run(nb, [&](int64_t b) { fn(b, b * block, std::min(n, (b + 1) * block)); });
}

}  // namespace hp
