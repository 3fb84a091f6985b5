// AVX2 + FMA attention kernels: attention_simd.h's Ops with 6×(2·8) register tiles (12
// accumulators, 2 rows of B and a broadcast of the 16 ymm registers). Compiled with -mavx2 -mfma;
// called only when the kernel registry selects AVX2 (registry.h).
#define HP_ISA avx2
#include "hp/kernels/cpu/simd_arch.h"

#include "hp/kernels/cpu/attention_simd.h"

HP_KERNEL_ENTRY(hp::kernels::detail::AttentionKernels, HP_ISA::attention_kernels<6, 2>());
