#include "hp/multicore/runtime.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "hp/core/profiler.h"
#include "hp/core/thread_pool.h"

namespace hp::multicore {
namespace {

constexpr const char* kC = "multicore";
// How often a waiting worker re-checks the watchdog, and how the comm worker polls calls in flight:
// yielding (cheap when compute threads want the core) for kSpinNs after its last progress, then
// sleeping kPollSleep between MPI tests (the dist progress thread also drives them).
constexpr auto kWaitTick = std::chrono::milliseconds(5);
constexpr auto kPollSleep = std::chrono::microseconds(20);
constexpr int64_t kSpinNs = 100000;

// Sets the process pool to one thread for the run, so kernels run inline on their worker.
class InlinePool {
 public:
  explicit InlinePool(bool on) : saved_(on ? num_threads() : 1) {
    if (saved_ != 1) set_num_threads(1);
  }
  ~InlinePool() {
    if (saved_ != 1) set_num_threads(saved_);
  }

 private:
  int saved_;
};

void profile(const Plan& plan, TaskId t, int64_t t0, int64_t t1) {
  if (profiler::recording())
    profiler::record(
        plan.task(t).role == Role::comm ? profiler::Category::comm : profiler::Category::op,
        profiler::intern(plan.task(t).name), t0, t1);
}

// The state of one run: event counters, task progress and the workers' spans, under one mutex.
class Execution {
 public:
  Execution(Plan& plan, const RuntimeOptions& o) : plan_(plan), opt_(o) {
    spans_.resize(size_t(o.cube_threads + o.vector_threads + 1));
    counter_.assign(size_t(plan.num_events()), 0);
    for (TaskId t = 0; t < plan.num_tasks(); ++t) {
      tasks_.push_back({});
      queues_[int(plan.task(t).role)].push_back(t);
    }
  }

  // Lane names in worker order: cube workers, vector workers, the comm worker.
  static std::vector<std::string> lanes(const RuntimeOptions& o) {
    std::vector<std::string> names;
    for (int i = 0; i < o.cube_threads; ++i) names.push_back("cube " + std::to_string(i));
    for (int i = 0; i < o.vector_threads; ++i) names.push_back("vector " + std::to_string(i));
    names.push_back("comm");
    return names;
  }

  // Worker w's part of the run (called on every worker, then finish()).
  void work(int w) {
    guard([&] {
      if (w < opt_.cube_threads)
        group_loop(Role::cube, w);
      else if (w < opt_.cube_threads + opt_.vector_threads)
        group_loop(Role::vector, w);
      else
        comm_loop(w);
    });
  }

  RunTrace finish(RunTrace trace) {
    if (error_) std::rethrow_exception(error_);
    for (auto& s : spans_) trace.spans.insert(trace.spans.end(), s.begin(), s.end());
    return trace;
  }

 private:
  struct TaskState {
    int64_t parts = 1, next_part = 0, parts_done = 0;
    bool started = false;
  };
  using Clock = std::chrono::steady_clock;

  // Runs a worker's loop; its exception (thrown with mu_ released by unwinding) stops the run.
  template <class Fn>
  void guard(Fn&& fn) {
    try {
      fn();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      fail(std::current_exception());
    }
  }

  // Under mu_.
  void fail(std::exception_ptr e) {
    if (!error_) error_ = e;
    cv_.notify_all();
  }
  void complete(TaskId t) {
    const EventId e = plan_.task(t).deps.trigger;
    if (e != kNoEvent) ++counter_[size_t(e)];
    cv_.notify_all();
  }
  const Wait* blocking(TaskId t) const {
    for (const Wait& w : plan_.task(t).deps.waits)
      if (counter_[size_t(w.event)] < w.count) return &w;
    return nullptr;
  }
  // Under mu_: throws WatchdogError when `worker` has waited on `t` since `since` past the limit.
  void watchdog(int worker, TaskId t, const Wait& w, Clock::time_point since) const {
    const double s = std::chrono::duration<double>(Clock::now() - since).count();
    if (s <= opt_.watchdog_s) return;
    HP_THROW(WatchdogError, kC, "rank ", opt_.rank, ": worker ", worker, " (",
             role_name(plan_.task(t).role), ") waited ", s, " s (limit ", opt_.watchdog_s,
             " s, HP_MULTICORE_TIMEOUT_S) for task '", plan_.task(t).name, "' on event '",
             plan_.event_name(w.event), "' (count ", counter_[size_t(w.event)], " of ", w.count,
             ")");
  }

  void group_loop(Role role, int worker) {
    auto& queue = queues_[int(role)];
    size_t& pos = pos_[int(role)];
    std::unique_lock<std::mutex> lk(mu_);
    TaskId waiting_on = -1;
    Clock::time_point since;
    while (!error_ && pos < queue.size()) {
      const TaskId t = queue[pos];
      TaskState& st = tasks_[size_t(t)];
      if (!st.started) {
        if (const Wait* w = blocking(t)) {
          if (waiting_on != t) waiting_on = t, since = Clock::now();
          watchdog(worker, t, *w, since);
          cv_.wait_for(lk, kWaitTick);
          continue;
        }
        st.started = true;
        st.parts = plan_.start(t);  // may throw (a dynamic GEMM out of its buffers)
      }
      const int64_t part = st.next_part++;
      if (st.next_part == st.parts) ++pos;  // the next worker moves on to the next task
      lk.unlock();
      const int64_t t0 = profiler::now_ns();
      plan_.run_part(t, part);
      const int64_t t1 = profiler::now_ns();
      spans_[size_t(worker)].push_back({t, part, worker, t0, t1});
      profile(plan_, t, t0, t1);
      lk.lock();
      if (++st.parts_done == st.parts) complete(t);
    }
  }

  struct Flight {
    TaskId task;
    dist::WorkPtr work;
    int64_t t0_ns, ready_ns;
    Clock::time_point posted;
  };

  void comm_loop(int worker) {
    const auto& queue = queues_[int(Role::comm)];
    size_t pos = 0;
    int64_t link_free_ns = 0, last_progress_ns = profiler::now_ns();
    std::vector<Flight> flights;
    TaskId waiting_on = -1;
    Clock::time_point since;
    std::unique_lock<std::mutex> lk(mu_);
    while (!error_ && (pos < queue.size() || !flights.empty())) {
      // Post every comm task whose waits hold, in plan order.
      const Wait* w = nullptr;
      while (pos < queue.size() && !(w = blocking(queue[pos]))) {
        const TaskId t = queue[pos++];
        tasks_[size_t(t)].started = true;
        plan_.start(t);
        lk.unlock();
        const int64_t t0 = profiler::now_ns();
        dist::WorkPtr work = plan_.task(t).comm.post(TaskContext(plan_, t));
        if (!work) HP_THROW(ValueError, kC, "comm task '", plan_.task(t).name, "' posted nothing");
        // Calls share the modelled link: a transfer starts when the one before it has ended.
        link_free_ns = std::max(t0, link_free_ns) + opt_.link.delay_ns(plan_.task(t).comm.bytes);
        flights.push_back({t, std::move(work), t0, link_free_ns, Clock::now()});
        last_progress_ns = profiler::now_ns();
        lk.lock();
      }
      if (w) {
        if (waiting_on != queue[pos]) waiting_on = queue[pos], since = Clock::now();
        watchdog(worker, queue[pos], *w, since);
      }
      if (flights.empty()) {
        if (pos < queue.size()) cv_.wait_for(lk, kWaitTick);
        continue;
      }
      lk.unlock();
      bool progressed = false;
      for (size_t i = 0; i < flights.size();) {
        Flight& f = flights[i];
        const double s = std::chrono::duration<double>(Clock::now() - f.posted).count();
        if (s > opt_.watchdog_s)
          HP_THROW(WatchdogError, kC, "rank ", opt_.rank, ": comm task '", plan_.task(f.task).name,
                   "' in flight for ", s, " s (limit ", opt_.watchdog_s,
                   " s, HP_MULTICORE_TIMEOUT_S); it triggers event '",
                   plan_.task(f.task).deps.trigger == kNoEvent
                       ? std::string("-")
                       : plan_.event_name(plan_.task(f.task).deps.trigger),
                   "'");
        if (!f.work->test() || profiler::now_ns() < f.ready_ns) {
          ++i;
          continue;
        }
        plan_.finish_comm(f.task, f.work->result());
        const int64_t t1 = profiler::now_ns();
        spans_[size_t(worker)].push_back({f.task, 0, worker, f.t0_ns, t1});
        {
          std::lock_guard<std::mutex> g(mu_);
          complete(f.task);
        }
        profile(plan_, f.task, f.t0_ns, t1);
        flights.erase(flights.begin() + std::ptrdiff_t(i));
        progressed = true;
      }
      if (progressed) last_progress_ns = profiler::now_ns();
      if (!progressed && profiler::now_ns() - last_progress_ns < kSpinNs)
        std::this_thread::yield();
      else if (!progressed)
        std::this_thread::sleep_for(kPollSleep);
      lk.lock();
    }
  }

  Plan& plan_;
  const RuntimeOptions& opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> counter_;
  std::vector<TaskState> tasks_;
  std::vector<TaskId> queues_[3];
  size_t pos_[3] = {0, 0, 0};
  std::vector<std::vector<Span>> spans_;  // per worker
  std::exception_ptr error_;
};

}  // namespace

// The runtime's threads, alive from construction to destruction: between runs they sleep on a
// condition variable; a run hands them its Execution and waits until every one has left it.
class Runtime::Workers {
 public:
  explicit Workers(int n) : n_(n) {
    for (int w = 0; w < n; ++w) threads_.emplace_back([this, w] { loop(w); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(Execution& e) {
    std::unique_lock<std::mutex> lk(mu_);
    exec_ = &e;
    pending_ = n_;
    ++generation_;
    cv_.notify_all();
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    exec_ = nullptr;
  }

 private:
  void loop(int w) {
    uint64_t seen = 0;
    for (;;) {
      Execution* e;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        e = exec_;
      }
      e->work(w);
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  const int n_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  Execution* exec_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool quit_ = false;
};

RuntimeOptions RuntimeOptions::from_env() {
  RuntimeOptions o;
  if (const char* v = std::getenv("HP_MULTICORE_TIMEOUT_S"); v && *v) {
    char* end = nullptr;
    o.watchdog_s = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(o.watchdog_s > 0.0))
      HP_THROW(ValueError, kC, "HP_MULTICORE_TIMEOUT_S='", v, "' is not a number > 0");
  }
  o.link = LinkModel::from_env();
  return o;
}

int64_t RunTrace::busy_ns(const Plan& plan, Role role) const {
  std::vector<std::pair<int64_t, int64_t>> iv;
  for (const Span& s : spans)
    if (plan.task(s.task).role == role) iv.emplace_back(s.t0_ns, s.t1_ns);
  std::sort(iv.begin(), iv.end());
  int64_t total = 0, end = INT64_MIN;
  for (auto [a, b] : iv) {
    if (b <= end) continue;
    total += b - std::max(a, end);
    end = b;
  }
  return total;
}

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  if (options_.cube_threads < 1 || options_.vector_threads < 1 || !(options_.watchdog_s > 0.0))
    HP_THROW(ValueError, kC, "runtime needs cube_threads >= 1 (got ", options_.cube_threads,
             "), vector_threads >= 1 (got ", options_.vector_threads, ") and watchdog_s > 0 (got ",
             options_.watchdog_s, ")");
  workers_ = std::make_unique<Workers>(options_.cube_threads + options_.vector_threads + 1);
}

Runtime::~Runtime() = default;

RunTrace Runtime::run(Plan& plan) {
  const std::lock_guard<std::mutex> one_run(run_mu_);
  plan.validate();
  const InlinePool pool(options_.inline_kernels);
  Execution e(plan, options_);
  RunTrace trace;
  trace.workers = Execution::lanes(options_);
  trace.t0_ns = profiler::now_ns();
  workers_->run(e);
  trace.t1_ns = profiler::now_ns();
  return e.finish(std::move(trace));
}

RunTrace run_sequential(Plan& plan, const LinkModel& link) {
  RunTrace trace;
  trace.workers = {"sequential"};
  trace.t0_ns = profiler::now_ns();
  for (TaskId t : plan.schedule()) {
    const int64_t t0 = profiler::now_ns();
    if (plan.task(t).role == Role::comm) {
      plan.start(t);
      dist::WorkPtr work = plan.task(t).comm.post(TaskContext(plan, t));
      if (!work) HP_THROW(ValueError, kC, "comm task '", plan.task(t).name, "' posted nothing");
      work->wait();
      const int64_t ready = t0 + link.delay_ns(plan.task(t).comm.bytes);
      while (profiler::now_ns() < ready) std::this_thread::sleep_for(kPollSleep);
      plan.finish_comm(t, work->result());
    } else {
      const int64_t parts = plan.start(t);
      for (int64_t p = 0; p < parts; ++p) plan.run_part(t, p);
    }
    const int64_t t1 = profiler::now_ns();
    trace.spans.push_back({t, 0, 0, t0, t1});
    profile(plan, t, t0, t1);
  }
  trace.t1_ns = profiler::now_ns();
  return trace;
}

}  // namespace hp::multicore
