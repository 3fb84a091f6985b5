// Multicore runtime: role workers executing a Plan (plan.h; docs/MULTICORE.md,
// docs/ARCHITECTURE.md §6).
//
// Workers (started with the Runtime, asleep between runs): `cube_threads` GEMM workers and
// `vector_threads` vector workers, each group taking its role's tasks in plan order and sharing a
// task's parts (row blocks of a GEMM, blocks of a vector task), and one comm worker that posts comm
// tasks in plan order (so every rank issues its collectives in the same order) and completes them
// by Work::test(), holding each completion for the link model (link.h). A task starts when its
// waits hold; its trigger fires when its last part (or its call) completes.
//
// Kernels inside tasks (kernels::gemm_f32, elementwise loops) must run on their worker rather than
// on the process thread pool, so the workers are the rank's cores: with `inline_kernels` the pool
// is set to one thread for the run and restored after (hp::set_num_threads; the calling thread
// blocks in run() meanwhile).
//
// Watchdog: a worker that waits on an event for longer than `watchdog_s`, or a comm call in flight
// for longer, stops the run with WatchdogError naming the rank, worker, task and event (with its
// count and the count needed) instead of hanging. The first error of any task stops the run and
// is rethrown by run() after every worker has stopped.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hp/multicore/link.h"
#include "hp/multicore/plan.h"

namespace hp::multicore {

// A run stopped by the watchdog; the message names rank, worker, task and event.
class WatchdogError : public Error {
 public:
  using Error::Error;
};

struct RuntimeOptions {
  int cube_threads = 1;
  int vector_threads = 1;
  double watchdog_s = 60.0;  // HP_MULTICORE_TIMEOUT_S
  LinkModel link;            // HP_LINK_GBPS, HP_LINK_US
  bool inline_kernels = true;
  int rank = 0;  // names this rank in errors and traces
  // Defaults with watchdog_s and link from the environment (ValueError naming a bad variable).
  static RuntimeOptions from_env();
};

// One part of a task (a comm task: its whole flight, post to completion) on one worker lane, in
// profiler::now_ns() time.
struct Span {
  TaskId task = 0;
  int64_t part = 0;
  int worker = 0;
  int64_t t0_ns = 0, t1_ns = 0;
};

// The timeline of one run.
struct RunTrace {
  std::vector<std::string> workers;  // lane names: "cube 0", "vector 0", "comm" (or "sequential")
  std::vector<Span> spans;
  int64_t t0_ns = 0, t1_ns = 0;
  double seconds() const { return double(t1_ns - t0_ns) * 1e-9; }
  // Nanoseconds some span of `role` was running: the union of their intervals.
  int64_t busy_ns(const Plan& plan, Role role) const;
};

// Starts its workers once (they sleep between runs) and runs plans one at a time.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = RuntimeOptions::from_env());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  // Validates the plan, resets its events to 0 and runs it. Throws the first task's error or
  // WatchdogError. Concurrent calls run one after the other.
  RunTrace run(Plan& plan);
  const RuntimeOptions& options() const { return options_; }

 private:
  class Workers;
  RuntimeOptions options_;
  std::mutex run_mu_;
  std::unique_ptr<Workers> workers_;
};

// Every task on the calling thread in plan.schedule() order, parts in order, each comm call posted
// and waited for (held for `link`): the reference a run must equal bitwise.
RunTrace run_sequential(Plan& plan, const LinkModel& link = {});

}  // namespace hp::multicore
