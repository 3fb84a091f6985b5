// AVX2 (+FMA, F16C): 8 f32 lanes, vector masks.
// The width-generic MX kernels (kernels_impl.h) instantiated on the shared SIMD seam's Arch.
#define HP_ISA avx2
#include "hp/kernels/cpu/simd_arch.h"
#include "hp/mx/kernels.h"

namespace hp::mx::detail::avx2 {
using A = hp::kernels::avx2::Arch;
}  // namespace hp::mx::detail::avx2

#include "hp/mx/kernels_impl.h"
#include "hp/mx/kernels_impl_dequant.h"
