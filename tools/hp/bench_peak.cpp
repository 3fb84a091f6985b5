// hp bench peak [--remeasure] [--dtype f32|bf16|both] [--seconds S]
//
// The GEMM ceilings `hp train` divides by for MFU (kernels/cpu/gemm_peak.h): read from the
// per-machine cache, or measured and cached when absent. --remeasure measures three times and
// keeps the best of those and the cached figure (on a shared VM one measurement can come out at
// half the ceiling): run it on an idle machine. Warnings about the cache go to stderr.
#include <cstdio>

#include "commands.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm_peak.h"

namespace hp::cli {

int run_bench_peak(const Args& in) {
  Args args = in;
  reject_unknown_flags(args, {"--dtype", "--seconds"}, {"--remeasure"});
  const bool remeasure = take_flag(args, "--remeasure");
  double seconds = kernels::kCachedPeakSeconds;
  if (std::string v; take_value(args, "--seconds", &v)) {
    seconds = parse_double("--seconds", v);
    if (!(seconds > 0 && seconds <= 600))
      throw UsageError{"--seconds expects a duration in (0, 600] seconds, got '" + v + "'"};
  }
  std::string dtype = "both";
  take_value(args, "--dtype", &dtype);
  if (dtype != "f32" && dtype != "bf16" && dtype != "both")
    throw UsageError{"--dtype expects f32, bf16 or both, got '" + dtype + "'"};
  reject_leftovers(args);
  std::vector<DType> dtypes;
  if (dtype != "bf16") dtypes.push_back(DType::f32);
  if (dtype != "f32") dtypes.push_back(DType::bf16);

  const kernels::PeakKey key = kernels::peak_key(DType::f32);
  const std::string cache = kernels::default_peak_cache_path();
  std::printf(
      "hp bench peak: the GEMM ceilings MFU divides by (2048^3, best call of >= 5 and %g s "
      "after a warm-up%s)\n",
      seconds, remeasure ? "; best of 3 such measurements and the cached figure" : "");
  std::printf("cpu        %s (%s), %d thread%s\n", key.cpu.c_str(), key.isa.c_str(), key.threads,
              key.threads == 1 ? "" : "s");
  std::printf("cache      %s\n",
              cache.empty() ? "none ($XDG_CACHE_HOME and $HOME unset)" : cache.c_str());
  for (DType dt : dtypes) {
    kernels::PeakOptions po;
    po.remeasure = remeasure;
    po.max_excess_load = -1;  // asked for: cached whatever the load (printed below)
    po.cache_path = cache;
    po.seconds = seconds;
    kernels::GemmPeak p = kernels::gemm_peak(dt, po);
    for (int again = 1; remeasure && again < 3; ++again) {
      std::printf("%-10s best so far %.1f GFLOP/s, measuring again (%d of 3)\n",
                  std::string(dtype_name(dt)).c_str(), p.gflops, again + 1);
      std::fflush(stdout);
      p = kernels::gemm_peak(dt, po);  // each keeps the better of the cache and itself
    }
    for (const std::string& w : p.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    char load[48] = "";
    if (p.load_average >= 0)
      std::snprintf(load, sizeof load, ", load average %.2f", p.load_average);
    std::printf("%-10s %.1f GFLOP/s = %.4f TFLOP/s, %s, measured %s%s%s\n",
                std::string(dtype_name(dt)).c_str(), p.gflops, p.gflops / 1e3, p.library.c_str(),
                p.measured_at.c_str(), p.cached ? " (cached)" : " (now)", load);
    if (!p.note.empty()) std::printf("           %s\n", p.note.c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace hp::cli
