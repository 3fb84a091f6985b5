// The profiled step range of a run and the Chrome trace each rank writes (profile.h).
#include "hp/train/profile.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "hp/io/chrome_trace.h"

namespace hp::train {

namespace {

std::string with_commas(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

}  // namespace

StepRange profile_range(const MetricsConfig& m, bool profile, int64_t first_step,
                        int64_t last_step) {
  if (m.profile_steps.size() == 2)
    return {std::max(first_step, static_cast<int64_t>(m.profile_steps[0])),
            std::min(last_step, static_cast<int64_t>(m.profile_steps[1]))};
  if (!profile) return {};
  if (first_step >= last_step) return {first_step, last_step};
  return {first_step + 1, std::min(last_step, first_step + 3)};
}

std::string trace_path(const std::string& run_dir, int rank) {
  const std::string name = rank == 0 ? "trace.json" : "trace.rank" + std::to_string(rank) + ".json";
  return (std::filesystem::path(run_dir) / name).string();
}

std::string chrome_trace_json(const profiler::Trace& trace, int rank) {
  io::ChromeTrace out;
  out.name_process(rank, "rank " + std::to_string(rank));
  for (const profiler::ThreadTrace& t : trace.threads) {
    out.name_thread(rank, t.tid, t.main ? "trainer" : "thread " + std::to_string(t.tid));
    for (const profiler::Event& e : t.events) {
      std::vector<io::TraceArg> args = {{"phase", std::string(profiler::phase_name(e.phase))}};
      if (e.module) args.emplace_back("module", std::string(e.module));
      out.complete(e.name, profiler::category_name(e.cat), rank, t.tid, e.ts_ns, e.dur_ns, args);
    }
  }
  return io::chrome_trace_document(out.events(), {{"rank", int64_t(rank)},
                                                  {"max_events", trace.max_events},
                                                  {"dropped_events", trace.dropped}});
}

RunProfiler::RunProfiler(StepRange range, std::string run_dir, int rank, int world_size,
                         int64_t max_events)
    : range_(range),
      run_dir_(std::move(run_dir)),
      rank_(rank),
      world_size_(world_size),
      max_events_(max_events) {}

RunProfiler::~RunProfiler() {
  if (recording_) profiler::stop();
}

void RunProfiler::begin_step(int64_t step) {
  if (range_.empty() || step < range_.first || step > range_.last) return;
  if (!recording_) {
    profiler::start(max_events_);
    recording_ = true;
    first_recorded_ = step;
  }
  step_t0_ = profiler::now_ns();
}

void RunProfiler::end_step(int64_t step) {
  if (!recording_) return;
  profiler::record(profiler::Category::step, profiler::intern("step " + std::to_string(step)),
                   step_t0_, profiler::now_ns());
  step_t0_ = 0;
  last_recorded_ = step;
  if (step >= range_.last) complete(step);
}

std::vector<std::string> RunProfiler::finish() {
  if (recording_) {
    // A stop ended the run inside the range; the step it interrupted counts as far as it ran.
    const int64_t step = step_t0_ != 0 ? last_recorded_ + 1 : last_recorded_;
    if (step_t0_ != 0)
      profiler::record(profiler::Category::step,
                       profiler::intern("step " + std::to_string(step) + " (stopped)"), step_t0_,
                       profiler::now_ns());
    complete(step);
  }
  return lines_;
}

void RunProfiler::complete(int64_t last_step) {
  const profiler::Trace trace = profiler::stop();
  recording_ = false;
  tables_ = profile_tables(trace);
  const std::string path = trace_path(run_dir_, rank_);
  errno = 0;
  std::ofstream f(path, std::ios::trunc);
  const bool written = static_cast<bool>(f << chrome_trace_json(trace, rank_) << std::flush);
  const std::string steps = std::to_string(first_recorded_) + ".." + std::to_string(last_step);
  if (written)
    lines_.push_back("profile: steps " + steps + " traced in " + path + " (" +
                     with_commas(tables_.events) + " events" +
                     (world_size_ > 1 ? "; the other ranks' in trace.rank<N>.json beside it" : "") +
                     "): open it in https://ui.perfetto.dev or chrome://tracing");
  else
    lines_.push_back("warning: cannot write the trace " + path + ": " +
                     (errno ? std::strerror(errno) : "write failed") +
                     " (the tables below are complete)");
  if (tables_.dropped > 0)
    lines_.push_back(
        "profile: the event cap metrics.profile_max_events = " + with_commas(tables_.max_events) +
        " was reached: " + with_commas(tables_.dropped) +
        " later events are not in the trace (the tables below count them)");
  lines_.push_back(format_profile_tables(tables_));
}

}  // namespace hp::train
