// The MFU denominator (docs/ARCHITECTURE.md §4 "Metrics"): the GEMM ceiling of the compute dtype on
// this machine, measured once by the library GEMM of that dtype — the faster of OpenBLAS's and
// oneDNN's sgemm for f32, oneDNN's bf16 matmul for bf16 — and cached per machine in $XDG_CACHE_HOME/hp/peak.json (default
// ~/.cache/hp/peak.json), keyed by CPU model, ISA flags, thread count and dtype.
//
// (gemm.h's gemm_peak_gflops is a different figure: what this build's own gemm_f32 / gemm_bf16
// reach, re-measured in every process; the GEMM benchmark prints it beside the libraries.)
#pragma once

#include <string>
#include <vector>

#include "hp/core/dtype.h"

namespace hp::kernels {

// What keys a cached peak: the machine as far as GEMM speed goes.
struct PeakKey {
  std::string cpu;  // /proc/cpuinfo "model name"
  std::string isa;  // the GEMM-relevant flags it has, space-separated ("avx2 fma f16c")
  int threads = 0;  // hp::num_threads()
  DType dtype = DType::f32;
};
PeakKey peak_key(DType dt);

struct GemmPeak {
  PeakKey key;
  double gflops = 0;
  std::string library;       // "OpenBLAS sgemm", "oneDNN sgemm", "oneDNN bf16 matmul (brg:avx512_core_amx)"
  std::string note;          // why the figure is not the dtype's own library GEMM, else ""
  std::string measured_at;   // UTC, "2026-12-01T10:22:03Z"
  double load_average = -1;  // 1-minute load average when measured (-1: unknown)
  bool cached = false;       // read from the cache rather than measured by this call
  std::string cache_path;    // the cache used ("" = none)
  std::vector<std::string> warnings;  // a corrupt or unwritable cache: what happened
};

// Measures the peak of dt (f32 or bf16) now, 2048³ multiplies, the best call of >= 5 and >= 2 s
// after a warm-up, at
// hp::num_threads() threads. bf16: the faster of oneDNN's bf16 matmul and the f32 ceiling (this
// library computes bf16 GEMMs in f32 where the CPU has no native bf16, so nothing slower bounds
// it); without a native oneDNN bf16 kernel, the f32 ceiling with a note saying so. Other dtypes
// throw ValueError.
GemmPeak measure_gemm_peak(DType dt, double min_seconds);

// Seconds of calls a cached ceiling is the best of (it is measured once per machine), and of one
// that serves only the run measuring it (under load, not cached).
constexpr double kCachedPeakSeconds = 2.0;
constexpr double kRunPeakSeconds = 0.5;

// The 1-minute load average (/proc/loadavg), -1 when unknown.
double load_average();

// $XDG_CACHE_HOME/hp/peak.json, else $HOME/.cache/hp/peak.json; "" when neither is set.
std::string default_peak_cache_path();

struct PeakOptions {
  // Measure even when the cache holds the figure. The cache keeps the higher of the two: a
  // measurement can only fall short of the ceiling (other load, frequency, a noisy neighbour on a
  // VM: back-to-back measurements here differ up to 2x), so the ceiling is the best one observed.
  bool remeasure = false;
  // A measurement is written only when the 1-minute load average when it began was at most
  // (online CPUs - measuring threads) + this: the measuring threads need their CPUs idle, so on 2
  // CPUs a 2-thread peak tolerates a load of 0.5 and a 1-thread peak 1.5. A busy machine measures
  // a low peak, and a cached figure outlives the load (it is used for this run only, with a
  // warning). < 0: always written (hp bench peak, run when the user says the machine is idle).
  double max_excess_load = 0.5;
  double seconds = kCachedPeakSeconds;  // how long a measurement that will be cached runs
  std::string cache_path = default_peak_cache_path();  // "" = no cache
};

// The peak of dt: the cache's entry for peak_key(dt), else measured now and written into the
// cache (other entries kept; with remeasure, the higher of the cached and the new figure). Processes of one machine take turns (a lock file beside the cache),
// so concurrent ranks measure once and not under each other's load. A corrupt, unreadable or
// unwritable cache adds a warning and costs a fresh measurement, never an error.
GemmPeak gemm_peak(DType dt, const PeakOptions& options = {});

// One line naming the peak and where it came from: "the cached f32 GEMM peak 0.204 TFLOP/s
// (OpenBLAS sgemm, 2 threads, measured 2026-12-01, ~/.cache/hp/peak.json)".
std::string describe_peak(const GemmPeak& p);

}  // namespace hp::kernels
