// Which SIMD instruction set the kernels run with.
//
// By default the best the CPU has: AVX-512 (F, BW, VL, DQ), else AVX2 with FMA, else the portable
// path. HP_ISA=scalar|avx2|avx512 selects one by name (tests and benchmarks compare paths that
// way). Asking for an ISA the CPU lacks is an error.
#pragma once

#include <string>
#include <string_view>

namespace hp::kernels {

enum class Isa { scalar, avx2, avx512 };

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// The ISA in use (cached; HP_ISA read once).
Isa active_isa();
// Overrides the ISA for this process (tests); throws ValueError if unsupported.
void set_active_isa(Isa isa);
// Back to the default (HP_ISA, else the CPU's best validated ISA).
void reset_active_isa();
// "scalar" | "avx2" | "avx512"; throws ValueError "[isa] unknown ISA '…'" otherwise.
Isa isa_from_name(std::string_view name);
// True where the CPU multiplies bf16 natively (AVX512_BF16 or AMX-BF16).
bool native_bf16();
// True where native bf16 multiplies beat f32 ones: AMX-BF16, or AMD's AVX512_BF16 (Zen 4 and
// later: the dot product at ~2× the f32 FMA's flop rate, against ~0.5 on Intel without AMX;
// bf16_rate.h measures it for the log). Decided by the CPU alone, never by a timing, because it
// changes results: the bf16 GEMM runs natively and training.mixed_precision auto picks bf16 only
// here (HP_BF16_GEMM=native|widen overrides the GEMM's choice).
bool bf16_compute_pays();
// For `hp --version` and the run log: "kernels avx512 (CPU best avx512, native bf16 yes, bf16 dot
// 0.48x f32 FMA; bf16 GEMM widened to f32, oneDNN sgemm)".
std::string isa_summary();

}  // namespace hp::kernels
