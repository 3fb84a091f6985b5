// Chrome's Trace Event Format, the JSON that https://ui.perfetto.dev and chrome://tracing open:
// metadata ("M") events naming processes and thread lanes, and complete ("X") events. The one
// writer of the project's timelines (the training profiler's trace.json, train/profile.h, and a
// multicore plan's run, multicore/trace.h).
//
// Times are given in nanoseconds and written as microseconds with three decimals (the format's
// unit), so nothing is lost. Strings are escaped: names come from FQNs and task names, which are
// plain, but are never trusted to be.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hp::io {

// An event argument or a document's otherData entry: {"key": value}.
using TraceArg = std::pair<std::string, std::variant<int64_t, std::string>>;

class ChromeTrace {
 public:
  // "process_name" of pid (e.g. "rank 0").
  void name_process(int64_t pid, std::string_view name);
  // "thread_name" of lane tid of pid; with sort_index >= 0 also its "thread_sort_index".
  void name_thread(int64_t pid, int64_t tid, std::string_view name, int64_t sort_index = -1);
  // A complete event [ts_ns, ts_ns + dur_ns) on lane tid of pid, in category cat.
  void complete(std::string_view name, std::string_view cat, int64_t pid, int64_t tid,
                int64_t ts_ns, int64_t dur_ns, const std::vector<TraceArg>& args = {});

  // The events so far, comma-separated: ranks' lists join with "," into one document's.
  const std::string& events() const { return events_; }

 private:
  void begin_event();
  std::string events_;
};

// A whole document: {"traceEvents": [events], "displayTimeUnit": "ms"} plus "otherData" when
// other is not empty.
std::string chrome_trace_document(std::string_view events, const std::vector<TraceArg>& other = {});

}  // namespace hp::io
