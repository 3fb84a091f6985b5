#define HP_ISA avx512
#include "hp/kernels/cpu/norm_impl.h"

const hp::kernels::NormTable<float>& hp::kernels::norm_table_avx512() {
  return avx512::NormKernels<avx512::Arch, float>::table();
}
