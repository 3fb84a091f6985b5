// hp bench peak [--remeasure] [--dtype f32|bf16|both]
//
// The GEMM ceilings `hp train` divides by for MFU (kernels/cpu/gemm_peak.h): read from the
// per-machine cache, or measured and cached when absent (or with --remeasure, which replaces the
// cached figures: run it on an idle machine). Warnings about the cache go to stderr.
#include <cstdio>

#include "commands.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm_peak.h"

namespace hp::cli {

int run_bench_peak(const Args& in) {
  Args args = in;
  reject_unknown_flags(args, {"--dtype"}, {"--remeasure"});
  const bool remeasure = take_flag(args, "--remeasure");
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
      "hp bench peak: the GEMM ceilings MFU divides by (2048^3, best call of >= 5 and 1 s "
      "after a warm-up)\n");
  std::printf("cpu        %s (%s), %d thread%s\n", key.cpu.c_str(), key.isa.c_str(), key.threads,
              key.threads == 1 ? "" : "s");
  std::printf("cache      %s\n",
              cache.empty() ? "none ($XDG_CACHE_HOME and $HOME unset)" : cache.c_str());
  for (DType dt : dtypes) {
    kernels::PeakOptions po;
    po.remeasure = remeasure;
    po.max_load_per_cpu = -1;  // asked for: cached whatever the load (printed below)
    po.cache_path = cache;
    const kernels::GemmPeak p = kernels::gemm_peak(dt, po);
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
