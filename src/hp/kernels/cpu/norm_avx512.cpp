#define HP_ISA avx512
#include "hp/kernels/cpu/norm_impl.h"

template <>
const hp::kernels::NormTable<float>*
hp::kernels::isa_table<hp::kernels::NormTable<float>, hp::kernels::Isa::avx512>() {
  return &avx512::NormKernels<avx512::Arch, float>::table();
}
