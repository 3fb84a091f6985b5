#define HP_ISA scalar
#include "hp/kernels/cpu/norm_impl.h"

namespace hp::kernels {

const NormTable<double>& norm_table_f64() {
  return scalar::NormKernels<ScalarArch<double>, double>::table();
}

}  // namespace hp::kernels

HP_KERNEL_ENTRY(hp::kernels::NormTable<float>, HP_ISA::NormKernels<HP_ISA::Arch, float>::table());
