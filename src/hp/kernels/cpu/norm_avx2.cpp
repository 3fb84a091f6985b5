#define HP_ISA avx2
#include "hp/kernels/cpu/norm_impl.h"

const hp::kernels::NormTable<float>& hp::kernels::norm_table_avx2() {
  return avx2::NormKernels<avx2::Arch, float>::table();
}
