// Whether native bf16 multiplies pay on this CPU, measured: AVX512_BF16 alone does not say. On
// Zen 4 vdpbf16ps issues at the FMA's rate (twice the flops); on the Intel Emerald Rapids VM this
// project ran on, a third of it (half the flops), so oneDNN's bf16 matmul there runs at 0.55× its
// f32 sgemm and widening bf16 to f32 is the faster bf16 GEMM.
#pragma once

namespace hp::kernels {

// Flop rate of vdpbf16ps over vfmadd231ps on 512-bit registers (about 2 where bf16 dot products
// issue at the FMA's rate, 0.5 on Emerald Rapids), best of five alternating ~1 ms loops. 0 where
// the CPU has no AVX512_BF16.
double measure_bf16_dot_rate();

}  // namespace hp::kernels
