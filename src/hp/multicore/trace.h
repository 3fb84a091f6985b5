// Chrome-trace timeline of a multicore run (opens in Perfetto / chrome://tracing): one process per
// rank ("rank r"), one thread lane per worker ("cube 0", "vector 0", "comm"), one complete event
// ("X") per executed part named after its task, with the task's role, part and event in args.
// Times are microseconds of profiler::now_ns(), the steady clock the processes of one host share.
#pragma once

#include <string>

#include "hp/dist/communicator.h"
#include "hp/multicore/plan.h"
#include "hp/multicore/runtime.h"

namespace hp::multicore {

// One rank's trace events as JSON objects separated by commas (no enclosing brackets).
std::string chrome_trace_events(const Plan& plan, const RunTrace& trace, int rank);
// A whole Chrome-trace document of one rank: {"traceEvents": [...], "displayTimeUnit": "ms"}.
std::string chrome_trace(const Plan& plan, const RunTrace& trace, int rank);
// Collective over `comm`: gathers every rank's events and rank 0 writes one document to `path`
// (IoError naming it when it cannot).
void write_chrome_trace(const std::string& path, const Plan& plan, const RunTrace& trace,
                        dist::Communicator& comm);

}  // namespace hp::multicore
