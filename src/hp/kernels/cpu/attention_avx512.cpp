// AVX-512 attention kernels: attention_simd.h's Ops with 6×(4·16) register tiles (24
// accumulators, 4 rows of B and a broadcast of the 32 zmm registers; a 64-wide block is one
// strip). Measured on a 2-core Emerald Rapids Xeon (bench_attention, T = 2048, D = 64, 1 thread,
// CPU time, loaded machine): 6×4 and 4×4 were fastest and within noise of each other; 8×3,
// 12×2 and 14×2 were 3–10% slower (more broadcasts per FMA, or a 64-wide block split 3 + 1).
// Compiled with -mavx512f (and bw/vl/dq); called only when the kernel registry selects AVX-512
// (registry.h).
#define HP_ISA avx512
#include "hp/kernels/cpu/simd_arch.h"

#include "hp/kernels/cpu/attention_simd.h"

HP_KERNEL_ENTRY(hp::kernels::detail::AttentionKernels, HP_ISA::attention_kernels<6, 4>());
