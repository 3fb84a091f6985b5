// GEMM ceilings for MFU: measure_gemm_peak (the libraries', gemm_peak.h) and gemm_peak_gflops (this
// build's own GEMMs, gemm.h).
#include "hp/kernels/cpu/gemm_peak.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/kernels/cpu/omp_threads.h"

namespace hp::kernels {
namespace detail {
namespace {

// 2048^3 multiply-adds: ~0.12 s per call at 140 GFLOP/s, large enough for every tile to reach
// steady state.
constexpr int64_t kPeakDim = 2048;
constexpr double kPeakFlop = 2.0 * double(kPeakDim) * double(kPeakDim) * double(kPeakDim);

// Operands with small exact values (no denormals or overflow to slow anything down).
struct PeakOperands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
  PeakOperands() : a(size_t(kPeakDim * kPeakDim)), b(a.size()), c(a.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = float(int64_t(i) % 7 - 3) * 0.125f;
      b[i] = float(int64_t(i) % 5 - 2) * 0.25f;
    }
    a16.resize(a.size());
    b16.resize(b.size());
    std::transform(a.begin(), a.end(), a16.begin(), f32_to_bf16);
    std::transform(b.begin(), b.end(), b16.begin(), f32_to_bf16);
  }
};

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GFLOP/s of the best call after one warm-up (page faults, packing buffers, thread start-up): at
// least `min_reps` calls and `min_s` seconds, so fast machines get as steady a figure as slow
// ones (on a shared VM one call in a second's worth can run at half speed).
double best_gflops(const auto& fn, int min_reps, double min_s) {
  fn();
  double best = 1e30, total = 0;
  for (int r = 0; r < 100 && (r < min_reps || total < min_s); ++r) {
    const double s = seconds_of(fn);
    best = std::min(best, s);
    total += s;
  }
  return kPeakFlop / best / 1e9;
}

// OpenBLAS sgemm with its own threads (as many as hp's pool), then back to the single thread
// per tile gemm.cpp runs it with.
double openblas_sgemm_gflops(PeakOperands& o, int threads, double min_s) {
  openblas_set_num_threads(threads);
  const double g = best_gflops(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kPeakDim, kPeakDim, kPeakDim, 1.0f,
                    o.a.data(), kPeakDim, o.b.data(), kPeakDim, 0.0f, o.c.data(), kPeakDim);
      },
      5, min_s);
  openblas_set_num_threads(1);
  return g;
}

// oneDNN's sgemm with as many OpenMP threads as hp's pool: on CPUs newer than Debian's OpenBLAS
// 0.3.21 (which then runs its SSE3 kernels) it is the f32 ceiling.
double dnnl_sgemm_gflops(PeakOperands& o, int threads, double min_s) {
  const OmpThreads omp(threads);
  return best_gflops(
      [&] {
        dnnl_sgemm('N', 'N', kPeakDim, kPeakDim, kPeakDim, 1.0f, o.a.data(), kPeakDim, o.b.data(),
                   kPeakDim, 0.0f, o.c.data(), kPeakDim);
      },
      5, min_s);
}

struct DnnlBf16 {
  double gflops = 0;  // 0: no native kernel
  std::string impl;   // oneDNN's implementation name ("brg:avx512_core_amx")
  std::string why;    // why there is no figure
};

// oneDNN bf16 × bf16 → f32 matmul. Only a native kernel counts: oneDNN 2.6 has none on AVX2 (the
// primitive cannot be created) and its reference kernel ("ref:any") is no hardware ceiling.
DnnlBf16 dnnl_bf16_gflops(PeakOperands& o, int threads, double min_s) {
  DnnlBf16 r;
  try {
    using namespace dnnl;
    const OmpThreads omp(threads);
    engine eng(engine::kind::cpu, 0);
    stream strm(eng);
    const memory::dims dims = {kPeakDim, kPeakDim};
    const memory::desc ad(dims, memory::data_type::bf16, memory::format_tag::ab);
    const memory::desc cd(dims, memory::data_type::f32, memory::format_tag::ab);
    const matmul::primitive_desc pd(matmul::desc(ad, ad, cd), eng);
    r.impl = pd.impl_info_str();
    if (r.impl.rfind("ref", 0) == 0) {
      r.why = "oneDNN has only its reference bf16 matmul (" + r.impl + ") on this CPU";
      return r;
    }
    matmul prim(pd);
    memory a(ad, eng, o.a16.data()), b(ad, eng, o.b16.data()), c(cd, eng, o.c.data());
    r.gflops = best_gflops(
        [&] {
          prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
          strm.wait();
        },
        5, min_s);
  } catch (const dnnl::error& e) {
    r.why = std::string("oneDNN has no bf16 matmul on this CPU (") + e.what() + ")";
  }
  return r;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// This build's own GEMMs (gemm_peak_gflops): one warm-up call, then the best of three.
double measure_own_peak(DType dt) {
  PeakOperands o;
  const int64_t n = kPeakDim;
  return best_gflops(
      [&] {
        if (dt == DType::f32)
          gemm_f32(false, false, n, n, n, 1.0f, o.a.data(), n, o.b.data(), n, 0.0f, o.c.data(), n);
        else
          gemm_bf16(false, false, n, n, n, 1.0f, o.a16.data(), n, o.b16.data(), n, 0.0f, o.c.data(),
                    DType::f32, n);
      },
      3, 1.0);
}

void check_peak_dtype(DType dt) {
  if (dt != DType::f32 && dt != DType::bf16)
    HP_THROW(ValueError, "gemm", "no GEMM peak for dtype ", dtype_name(dt), " (f32 and bf16 only)");
}

}  // namespace
}  // namespace detail

double load_average() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

GemmPeak measure_gemm_peak(DType dt, double min_seconds) {
  detail::check_peak_dtype(dt);
  GemmPeak p;
  p.key = peak_key(dt);
  p.load_average = load_average();
  p.measured_at = detail::utc_now();
  detail::PeakOperands o;
  // The faster f32 library is the f32 ceiling (sgemm_tile uses oneDNN's on AVX-512).
  const double openblas = detail::openblas_sgemm_gflops(o, p.key.threads, min_seconds);
  const double dnnl = detail::dnnl_sgemm_gflops(o, p.key.threads, min_seconds);
  const double f32 = std::max(openblas, dnnl);
  p.gflops = f32;
  p.library = dnnl > openblas ? "oneDNN sgemm" : "OpenBLAS sgemm";
  if (dt == DType::bf16) {
    const detail::DnnlBf16 bf16 = detail::dnnl_bf16_gflops(o, p.key.threads, min_seconds);
    if (bf16.gflops >= f32) {
      p.gflops = bf16.gflops;
      p.library = "oneDNN bf16 matmul (" + bf16.impl + ")";
    } else if (bf16.gflops > 0) {
      p.note = "oneDNN's bf16 matmul (" + bf16.impl + ") reaches only " +
               std::to_string(int64_t(bf16.gflops)) +
               " GFLOP/s here: bf16 GEMMs are bounded by the f32 ceiling";
    } else {
      p.note = bf16.why + ": bf16 GEMMs run in f32, so the f32 ceiling bounds them";
    }
  }
  return p;
}

double gemm_peak_gflops(DType dt) {
  detail::check_peak_dtype(dt);
  static std::mutex mu;
  static std::map<std::pair<DType, int>, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dt, num_threads());
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, detail::measure_own_peak(dt)).first;
  return it->second;
}

}  // namespace hp::kernels
