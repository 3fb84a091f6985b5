// The profile of a training run (`hp train --profile`, metrics.profile_steps): which steps are
// recorded (core/profiler.h), the Chrome trace every rank writes and the time tables rank 0 prints
// (docs/PERFORMANCE.md, "Profiling").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/core/profiler.h"
#include "hp/train/config.h"

namespace hp::train {

// Steps [first, last], 1-based and inclusive; empty when first > last.
struct StepRange {
  int64_t first = 1, last = 0;
  bool empty() const { return first > last; }
};

// metrics.profile_steps when set, clipped to this call's steps [first_step, last_step]; else with
// `profile` (hp train --profile) the three steps after this call's first one (which pays one-time
// costs), or the only step; else none.
StepRange profile_range(const MetricsConfig& m, bool profile, int64_t first_step,
                        int64_t last_step);

// Where the recorded steps' time went on the thread that ran them, each moment counted once
// (core/profiler.h): work in each phase, collectives, and idle = the rest of the steps (the gaps
// between ops: loader, module and autograd bookkeeping, casts outside ops). Seconds are totals
// over the recorded steps.
struct ProfileTables {
  int64_t steps = 0;
  double step_s = 0;
  double forward_s = 0, backward_s = 0, optimizer_s = 0, checkpoint_s = 0;
  double other_s = 0;  // work outside the phases (the loader's ops)
  double communication_s = 0, idle_s = 0;
  struct OpRow {
    std::string phase;  // forward, backward, optimizer, checkpoint, none
    std::string kind;   // op, node (backward), comm, phase (optimizer / checkpoint themselves)
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
  };
  std::vector<OpRow> ops;  // largest first; with idle_s they sum to step_s
  struct LayerRow {
    std::string layer;  // FQN through its layer index ("model.layers.3"), or a top module's FQN
    double forward_s = 0, backward_s = 0, communication_s = 0, other_s = 0;
  };
  std::vector<LayerRow> layers;  // in forward order
  int64_t events = 0, dropped = 0, max_events = 0;
  int64_t other_threads = 0;
  double other_threads_busy_s = 0;  // their once-counted time (not in the tables)
};

ProfileTables profile_tables(const profiler::Trace& trace);
// The tables as text: phases, the `top_ops` largest ops (the rest summed in one row), layers.
std::string format_profile_tables(const ProfileTables& t, size_t top_ops = 25);

// The trace in Chrome's Trace Event Format: {"traceEvents": [...]} of complete ("X") events with
// ts/dur in microseconds, pid = rank, tid = OS thread id, args {phase, module}; thread and process
// names as metadata ("M") events. Opens in https://ui.perfetto.dev and chrome://tracing.
std::string chrome_trace_json(const profiler::Trace& trace, int rank);

// run_dir/trace.json for rank 0, run_dir/trace.rank<N>.json for the others.
std::string trace_path(const std::string& run_dir, int rank);

// What the trainer calls around each step of a run.
class RunProfiler {
 public:
  RunProfiler(StepRange range, std::string run_dir, int rank, int world_size, int64_t max_events);
  ~RunProfiler();  // an exception mid-range: stops the recording (nothing written)
  RunProfiler(const RunProfiler&) = delete;
  RunProfiler& operator=(const RunProfiler&) = delete;

  // Step `step` begins: the recording starts at the first step of the range this call runs.
  void begin_step(int64_t step);
  // Step `step` is over (its checkpoint included): after the range's last step, stops the
  // recording and writes this rank's trace.
  void end_step(int64_t step);
  // The run is over: ends a recording a stop cut short. Returns the lines for the run log (the
  // trace file, a note when the event cap was hit, the tables); empty without a profile.
  std::vector<std::string> finish();
  const ProfileTables& tables() const { return tables_; }

 private:
  void complete(int64_t last_step);

  StepRange range_;
  std::string run_dir_;
  int rank_, world_size_;
  int64_t max_events_;
  bool recording_ = false;
  int64_t step_t0_ = 0, first_recorded_ = 0, last_recorded_ = 0;
  ProfileTables tables_;
  std::vector<std::string> lines_;
};

}  // namespace hp::train
