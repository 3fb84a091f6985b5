// The per-machine cache of GEMM peaks (gemm_peak.h): $XDG_CACHE_HOME/hp/peak.json,
//   {"format": 1, "peaks": [{"cpu": "AMD EPYC 7B13", "isa": "avx avx2 fma f16c", "threads": 2,
//     "dtype": "f32", "gflops": 140.8, "library": "OpenBLAS sgemm", "note": "",
//     "measured_at": "2026-12-01T10:22:03Z", "load_average": 0.4}, ...]}
// A cache is only ever a shortcut: whatever is wrong with it costs a measurement and a warning.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/io/json.h"
#include "hp/kernels/cpu/gemm_peak.h"

namespace hp::kernels {
namespace {

namespace fs = std::filesystem;
using io::JsonValue;

constexpr int kCacheFormat = 1;

// The /proc/cpuinfo flags that change what a GEMM library can do, in this order.
constexpr const char* kGemmFlags[] = {"avx",         "avx2",        "fma",      "f16c",
                                      "avx512f",     "avx512bw",    "avx512vl", "avx512_vnni",
                                      "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile",
                                      "amx_bf16",    "amx_int8",    "amx_fp16"};

// "model name" and "flags" of the first processor in /proc/cpuinfo.
std::pair<std::string, std::string> cpu_model_and_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  auto value = [](const std::string& l) {
    const size_t colon = l.find(':');
    size_t b = colon == std::string::npos ? l.size() : colon + 1;
    while (b < l.size() && l[b] == ' ') ++b;
    return l.substr(b);
  };
  bool have_model = false;
  while (std::getline(in, line) && (!have_model || flags.empty())) {
    if (!have_model && line.rfind("model name", 0) == 0) model = value(line), have_model = true;
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = value(line);
  }
  return {model, flags};
}

std::string home_relative(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (home && *home && path.rfind(std::string(home) + "/", 0) == 0)
    return std::string("~").append(path, std::strlen(home));
  return path;
}

// Exclusive lock on `<cache>.lock` while held (best effort: no lock when it cannot be created).
class CacheLock {
 public:
  explicit CacheLock(const std::string& cache) {
    std::error_code ec;
    fs::create_directories(fs::path(cache).parent_path(), ec);
    fd_ = ::open((cache + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

// Field readers that never throw: a field of the wrong type reads as absent.
std::string string_at(const JsonValue& e, const char* key) {
  const JsonValue* v = e.find(key);
  return v && v->is_string() ? v->as_string() : std::string();
}
double number_at(const JsonValue& e, const char* key, double absent) {
  const JsonValue* v = e.find(key);
  return v && v->is_number() ? v->as_double() : absent;
}
// The field as JSON text, for messages ("null" when absent).
std::string text_at(const JsonValue& e, const char* key) {
  const JsonValue* v = e.find(key);
  return v ? v->dump() : "null";
}

JsonValue empty_cache() {
  return JsonValue::object({{"format", kCacheFormat}, {"peaks", JsonValue::array()}});
}

// The cache document, or an empty one when the file is absent; corrupt or unreadable → a warning
// and an empty one (the file is rewritten whole after the measurement).
JsonValue read_cache(const std::string& path, std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return empty_cache();
  std::ifstream in(path);
  std::stringstream text;
  if (!(text << in.rdbuf())) {
    warnings->push_back("cannot read the GEMM peak cache " + path + ": " + std::strerror(errno) +
                        "; measuring afresh");
    return empty_cache();
  }
  const std::optional<io::Json> parsed = io::try_parse_json(text.str(), path);
  std::string why;
  if (!parsed)
    why = "not valid JSON";
  else if (const JsonValue& doc = parsed->value();
           !doc.contains("peaks") || !doc.find("peaks")->is_array())
    why = "no \"peaks\" list";
  else if (number_at(doc, "format", 0) != kCacheFormat)
    why = "format " + text_at(doc, "format") + ", expected " + std::to_string(kCacheFormat);
  if (why.empty()) return parsed->value();
  warnings->push_back("ignoring the corrupt GEMM peak cache " + path + " (" + why +
                      "); measuring afresh");
  return empty_cache();
}

bool same_key(const JsonValue& e, const PeakKey& k) {
  return e.is_object() && string_at(e, "cpu") == k.cpu && string_at(e, "isa") == k.isa &&
         number_at(e, "threads", -1) == k.threads && string_at(e, "dtype") == dtype_name(k.dtype);
}

// The entry for `key`; a malformed one is reported and treated as absent.
std::optional<GemmPeak> find_entry(const JsonValue& doc, const PeakKey& key,
                                   std::vector<std::string>* warnings, const std::string& path) {
  for (const JsonValue& e : doc.find("peaks")->elements()) {
    if (!same_key(e, key)) continue;
    const double gflops = number_at(e, "gflops", -1);
    if (!std::isfinite(gflops) || gflops <= 0) {
      warnings->push_back("ignoring the " + std::string(dtype_name(key.dtype)) + " entry of " +
                          path + " (gflops " + text_at(e, "gflops") + "); measuring afresh");
      return std::nullopt;
    }
    GemmPeak p;
    p.key = key;
    p.gflops = gflops;
    p.library = string_at(e, "library");
    p.note = string_at(e, "note");
    p.measured_at = string_at(e, "measured_at");
    p.load_average = number_at(e, "load_average", -1);
    return p;
  }
  return std::nullopt;
}

// Writes doc to path through a temporary file and a rename, so readers never see half a file.
bool write_cache(const std::string& path, const JsonValue& doc, std::string* error) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << doc.dump(2, io::KeyOrder::sorted) << "\n" << std::flush)) {
      *error = errno ? std::strerror(errno) : "write failed";
      fs::remove(tmp, ec);
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = std::strerror(errno);
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace

PeakKey peak_key(DType dt) {
  const auto [model, flags] = cpu_model_and_flags();
  std::istringstream words(flags);
  std::vector<std::string> have;
  for (std::string w; words >> w;) have.push_back(w);
  std::string isa;
  for (const char* f : kGemmFlags) {
    if (std::find(have.begin(), have.end(), f) == have.end()) continue;
    if (!isa.empty()) isa += ' ';
    isa += f;
  }
  return {model, isa.empty() ? "none" : isa, num_threads(), dt};
}

std::string default_peak_cache_path() {
  // XDG: a relative $XDG_CACHE_HOME is invalid and ignored.
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/')
    return (fs::path(xdg) / "hp" / "peak.json").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "hp" / "peak.json").string();
  return "";
}

GemmPeak gemm_peak(DType dt, const PeakOptions& o) {
  const std::string& path = o.cache_path;
  if (path.empty()) {
    GemmPeak p = measure_gemm_peak(dt, kRunPeakSeconds);
    p.warnings.push_back(
        "no cache directory ($XDG_CACHE_HOME and $HOME unset): the GEMM peak "
        "was measured now and is not cached");
    return p;
  }
  const PeakKey key = peak_key(dt);
  std::vector<std::string> warnings;
  const CacheLock lock(path);  // concurrent ranks: one measures, the others then read its entry
  JsonValue doc = read_cache(path, &warnings);
  std::optional<GemmPeak> cached = find_entry(doc, key, &warnings, path);
  if (cached) {
    cached->cached = true;
    cached->cache_path = path;
  }
  if (cached && !o.remeasure) {
    cached->warnings = std::move(warnings);
    return *cached;
  }
  // A figure measured under load is kept for this process only: later runs in it (tests, a
  // resumed run) reuse it rather than measure again.
  static std::mutex loaded_mu;
  static std::map<std::pair<DType, int>, GemmPeak> loaded;
  std::lock_guard<std::mutex> loaded_lock(loaded_mu);
  if (auto it = loaded.find({dt, key.threads}); it != loaded.end() && !o.remeasure)
    return it->second;
  // Whether the figure may be cached is decided by the load before measuring; a figure that will
  // be cached is measured for longer.
  const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const double allowed = double(std::max(0L, cpus - long(key.threads))) + o.max_excess_load;
  const double load = load_average();
  const bool busy = o.max_excess_load >= 0 && load > allowed;
  GemmPeak p = measure_gemm_peak(dt, busy ? std::min(kRunPeakSeconds, o.seconds) : o.seconds);
  p.load_average = load;  // the figure the gate used
  if (cached && cached->gflops >= p.gflops) {  // only with remeasure
    char why[200];
    std::snprintf(why, sizeof why,
                  "kept the cached %s GEMM peak %.1f GFLOP/s: this measurement reached %.1f, and "
                  "a ceiling is the best figure observed",
                  std::string(dtype_name(dt)).c_str(), cached->gflops, p.gflops);
    warnings.push_back(why);
    cached->warnings = std::move(warnings);
    return *cached;
  }
  if (busy) {
    char why[320];
    std::snprintf(why, sizeof why,
                  "the GEMM peak was measured under load (load average %.2f, above %.2f for %d "
                  "measuring threads on %ld CPUs): used for this run, not cached; cache it on an "
                  "idle machine with `hp bench peak --remeasure`",
                  p.load_average, allowed, key.threads, cpus);
    warnings.push_back(why);
    p.warnings = std::move(warnings);
    loaded[{dt, key.threads}] = p;
    return p;
  }
  JsonValue& peaks = doc["peaks"];
  for (size_t i = peaks.size(); i-- > 0;)
    if (same_key(peaks[i], key)) peaks.erase(i);
  peaks.push_back(JsonValue::object({{"cpu", key.cpu},
                                     {"isa", key.isa},
                                     {"threads", key.threads},
                                     {"dtype", std::string(dtype_name(dt))},
                                     {"gflops", p.gflops},
                                     {"library", p.library},
                                     {"note", p.note},
                                     {"measured_at", p.measured_at},
                                     {"load_average", p.load_average}}));
  std::string error;
  if (write_cache(path, doc, &error))
    p.cache_path = path;
  else
    warnings.push_back("cannot write the GEMM peak cache " + path + ": " + error +
                       "; the peak is not cached (measured again next time)");
  p.warnings = std::move(warnings);
  return p;
}

std::string describe_peak(const GemmPeak& p) {
  char figure[64];
  std::snprintf(figure, sizeof figure, "%.3f TFLOP/s", p.gflops / 1e3);
  std::string s = std::string(p.cached ? "the cached " : "the ") +
                  std::string(dtype_name(p.key.dtype)) + " GEMM peak " + figure + " (" + p.library +
                  ", " + std::to_string(p.key.threads) + " thread" +
                  (p.key.threads == 1 ? "" : "s") + ", measured " +
                  (p.cached ? p.measured_at.substr(0, 10) : std::string("now"));
  if (p.load_average >= 1.0) {
    char load[48];
    std::snprintf(load, sizeof load, " under load %.1f", p.load_average);
    s += load;
  }
  if (p.cache_path.empty())
    s += ", not cached";
  else
    s += (p.cached ? ", " : ", cached in ") + home_relative(p.cache_path);
  if (!p.note.empty()) s += "; " + p.note;
  return s + ")";
}

}  // namespace hp::kernels
