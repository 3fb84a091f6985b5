#include "hp/kernels/cpu/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hp/core/error.h"
#include "hp/kernels/cpu/bf16_rate.h"
#include "hp/kernels/cpu/gemm_native.h"

namespace hp::kernels {
namespace {

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
  return Isa::scalar;
}

Isa from_env() {
  const Isa best = detect();
  const char* env = std::getenv("HP_ISA");
  // The best ISA the CPU has. The AVX-512 tables pass the whole suite on AVX-512 hardware (Zen 4,
  // and Intel Emerald Rapids with AVX512_BF16; docs/PERFORMANCE.md "Elementwise: what bounds it").
  if (!env || !*env) return best;
  std::string s(env);
  const Isa want = isa_from_name(s);
  if (!isa_supported(want))
    HP_THROW(ValueError, "isa", "HP_ISA='", s, "' is not supported by this CPU (best: ",
             isa_name(best), ")");
  return want;
}

std::atomic<int>& active() {
  static std::atomic<int> a{static_cast<int>(from_env())};
  return a;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(detect()); }

Isa active_isa() { return static_cast<Isa>(active().load()); }

Isa isa_from_name(std::string_view name) {
  if (name == "scalar") return Isa::scalar;
  if (name == "avx2") return Isa::avx2;
  if (name == "avx512") return Isa::avx512;
  HP_THROW(ValueError, "isa", "unknown ISA '", name, "' (expected scalar, avx2 or avx512)");
}

bool native_bf16() {
  __builtin_cpu_init();
  static const bool yes = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  return yes;
}

namespace {

bool amx_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("amx-bf16");
}

double bf16_dot_rate() {
  static const double rate = native_bf16() ? measure_bf16_dot_rate() : 0.0;
  return rate;
}

}  // namespace

bool bf16_compute_pays() {
  // A property of the CPU, never of a timing: the choice changes results (native tiles round the
  // bf16 products' sums differently from widened f32 ones), and the rate probe read 1.20-1.28 on
  // the Emerald Rapids that reads 0.5 idle while the sanitizer tests loaded both cores, so runs of
  // one config disagreed in the last bits. AMX pays; AMD's AVX512_BF16 (Zen 4 and later) issues
  // vdpbf16ps at the FMA's rate (twice the flops); Intel's without AMX (Cooper Lake, Sapphire /
  // Emerald Rapids with AMX hidden, as in VMs) at a third of it, where widening wins.
  __builtin_cpu_init();
  static const bool pays = native_bf16() && (amx_bf16() || __builtin_cpu_is("amd"));
  return pays;
}

std::string isa_summary() {
  std::string dot;
  if (native_bf16() && !amx_bf16()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, ", bf16 dot %.2fx f32 FMA", bf16_dot_rate());
    dot = buf;
  }
  return std::string("kernels ") + isa_name(active_isa()) + " (CPU best " + isa_name(detect()) +
         ", native bf16 " + (native_bf16() ? "yes" : "no") + dot + "; " +
         detail::bf16_gemm_summary() + ")";
}

void reset_active_isa() { active().store(static_cast<int>(from_env())); }

void set_active_isa(Isa isa) {
  if (!isa_supported(isa))
    HP_THROW(ValueError, "isa", "ISA ", isa_name(isa), " is not supported by this CPU");
  active().store(static_cast<int>(isa));
}

}  // namespace hp::kernels
