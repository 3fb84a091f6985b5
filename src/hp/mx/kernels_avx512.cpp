// AVX-512 (F/BW/VL/DQ): 16 f32 lanes, k-masks. Built everywhere; the kernel registry
// (kernels/registry.h) selects it only when AVX-512 is the active ISA.
// The width-generic MX kernels (kernels_impl.h) instantiated on the shared SIMD seam's Arch.
#define HP_ISA avx512
#include "hp/kernels/cpu/simd_arch.h"
#include "hp/mx/kernels.h"

namespace hp::mx::detail::avx512 {
using A = hp::kernels::avx512::Arch;
}  // namespace hp::mx::detail::avx512

#include "hp/mx/kernels_impl.h"
#include "hp/mx/kernels_impl_dequant.h"
