#define HP_ISA avx2
#include "hp/kernels/cpu/norm_impl.h"

template <>
const hp::kernels::NormTable<float>*
hp::kernels::isa_table<hp::kernels::NormTable<float>, hp::kernels::Isa::avx2>() {
  return &avx2::NormKernels<avx2::Arch, float>::table();
}
