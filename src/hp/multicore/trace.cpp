#include "hp/multicore/trace.h"

#include <cstring>
#include <fstream>

#include "hp/io/chrome_trace.h"

namespace hp::multicore {

std::string chrome_trace_events(const Plan& plan, const RunTrace& trace, int rank) {
  io::ChromeTrace out;
  out.name_process(rank, "rank " + std::to_string(rank));
  for (size_t w = 0; w < trace.workers.size(); ++w)
    out.name_thread(rank, int64_t(w), trace.workers[w], int64_t(w));
  for (const Span& s : trace.spans) {
    const Task& t = plan.task(s.task);
    const std::string trig = t.deps.trigger == kNoEvent ? "-" : plan.event_name(t.deps.trigger);
    out.complete(t.name, role_name(t.role), rank, s.worker, s.t0_ns, s.t1_ns - s.t0_ns,
                 {{"part", int64_t(s.part)}, {"parts", int64_t(plan.num_parts(s.task))},
                  {"triggers", trig}});
  }
  return out.events();
}

std::string chrome_trace(const Plan& plan, const RunTrace& trace, int rank) {
  return io::chrome_trace_document(chrome_trace_events(plan, trace, rank));
}

void write_chrome_trace(const std::string& path, const Plan& plan, const RunTrace& trace,
                        dist::Communicator& comm) {
  const std::string mine = chrome_trace_events(plan, trace, comm.rank());
  // Every rank's length, then the bytes ([sum of lengths] u8, rank order).
  Tensor len = comm.all_gather(from_data<int64_t>({int64_t(mine.size())}, {1}));
  std::vector<int64_t> counts(len.data<int64_t>(), len.data<int64_t>() + comm.size());
  Tensor bytes = empty({int64_t(mine.size())}, DType::u8);
  if (!mine.empty()) std::memcpy(bytes.raw_data(), mine.data(), mine.size());
  Tensor all = comm.all_gather_v(bytes, counts);
  if (comm.rank() != 0) return;
  std::string events;
  const char* p = static_cast<const char*>(all.raw_data());
  for (int64_t n : counts) {
    if (!events.empty()) events += ",\n";
    events.append(p, size_t(n));
    p += n;
  }
  std::ofstream f(path);
  f << io::chrome_trace_document(events);
  if (!f) HP_THROW(IoError, "multicore", "cannot write the Chrome trace '", path, "'");
}

}  // namespace hp::multicore
