// The Chrome trace writer (chrome_trace.h).
#include "hp/io/chrome_trace.h"

#include <cstdio>

namespace hp::io {
namespace {

void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

// ns as µs with three decimals: "12.345".
void append_us(std::string& out, int64_t ns) {
  char buf[32];
  const char* sign = ns < 0 ? "-" : "";
  const long long a = ns < 0 ? -static_cast<long long>(ns) : static_cast<long long>(ns);
  std::snprintf(buf, sizeof buf, "%s%lld.%03lld", sign, a / 1000, a % 1000);
  out += buf;
}

void append_args(std::string& out, const std::vector<TraceArg>& args) {
  out += '{';
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ", ";
    append_string(out, args[i].first);
    out += ": ";
    if (const auto* n = std::get_if<int64_t>(&args[i].second))
      out += std::to_string(*n);
    else
      append_string(out, std::get<std::string>(args[i].second));
  }
  out += '}';
}

void append_ids(std::string& out, int64_t pid, int64_t tid) {
  out += "\"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(tid);
}

}  // namespace

void ChromeTrace::begin_event() {
  if (!events_.empty()) events_ += ",\n";
}

void ChromeTrace::name_process(int64_t pid, std::string_view name) {
  begin_event();
  events_ += "{\"name\": \"process_name\", \"ph\": \"M\", ";
  append_ids(events_, pid, 0);
  events_ += ", \"args\": ";
  append_args(events_, {{"name", std::string(name)}});
  events_ += '}';
}

void ChromeTrace::name_thread(int64_t pid, int64_t tid, std::string_view name,
                              int64_t sort_index) {
  begin_event();
  events_ += "{\"name\": \"thread_name\", \"ph\": \"M\", ";
  append_ids(events_, pid, tid);
  events_ += ", \"args\": ";
  append_args(events_, {{"name", std::string(name)}});
  events_ += '}';
  if (sort_index < 0) return;
  begin_event();
  events_ += "{\"name\": \"thread_sort_index\", \"ph\": \"M\", ";
  append_ids(events_, pid, tid);
  events_ += ", \"args\": ";
  append_args(events_, {{"sort_index", sort_index}});
  events_ += '}';
}

void ChromeTrace::complete(std::string_view name, std::string_view cat, int64_t pid, int64_t tid,
                           int64_t ts_ns, int64_t dur_ns, const std::vector<TraceArg>& args) {
  begin_event();
  events_ += "{\"name\": ";
  append_string(events_, name);
  events_ += ", \"cat\": ";
  append_string(events_, cat);
  events_ += ", \"ph\": \"X\", \"ts\": ";
  append_us(events_, ts_ns);
  events_ += ", \"dur\": ";
  append_us(events_, dur_ns);
  events_ += ", ";
  append_ids(events_, pid, tid);
  events_ += ", \"args\": ";
  append_args(events_, args);
  events_ += '}';
}

std::string chrome_trace_document(std::string_view events, const std::vector<TraceArg>& other) {
  std::string out = "{\"traceEvents\": [\n";
  out += events;
  out += "\n],\n\"displayTimeUnit\": \"ms\"";
  if (!other.empty()) {
    out += ",\n\"otherData\": ";
    append_args(out, other);
  }
  out += "}\n";
  return out;
}

}  // namespace hp::io
