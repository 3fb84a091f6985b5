#include "hp/multicore/trace.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace hp::multicore {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string wrap(const std::string& events) {
  return "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n" + events + "\n]}\n";
}

}  // namespace

std::string chrome_trace_events(const Plan& plan, const RunTrace& trace, int rank) {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed;
  os << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << rank
     << ", \"args\": {\"name\": \"rank " << rank << "\"}}";
  for (size_t w = 0; w < trace.workers.size(); ++w) {
    os << ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << rank << ", \"tid\": " << w
       << ", \"args\": {\"name\": " << quoted(trace.workers[w]) << "}}";
    os << ",\n{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " << rank
       << ", \"tid\": " << w << ", \"args\": {\"sort_index\": " << w << "}}";
  }
  for (const Span& s : trace.spans) {
    const Task& t = plan.task(s.task);
    const std::string trig = t.deps.trigger == kNoEvent ? "-" : plan.event_name(t.deps.trigger);
    os << ",\n{\"ph\": \"X\", \"name\": " << quoted(t.name) << ", \"cat\": \"" << role_name(t.role)
       << "\", \"pid\": " << rank << ", \"tid\": " << s.worker
       << ", \"ts\": " << double(s.t0_ns) * 1e-3
       << ", \"dur\": " << double(s.t1_ns - s.t0_ns) * 1e-3 << ", \"args\": {\"part\": " << s.part
       << ", \"parts\": " << plan.num_parts(s.task) << ", \"triggers\": " << quoted(trig) << "}}";
  }
  return os.str();
}

std::string chrome_trace(const Plan& plan, const RunTrace& trace, int rank) {
  return wrap(chrome_trace_events(plan, trace, rank));
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
  f << wrap(events);
  if (!f) HP_THROW(IoError, "multicore", "cannot write the Chrome trace '", path, "'");
}

}  // namespace hp::multicore
