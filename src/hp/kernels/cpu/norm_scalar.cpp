#define HP_ISA scalar
#include "hp/kernels/cpu/norm_impl.h"

namespace hp::kernels {

template <>
const NormTable<float>* isa_table<NormTable<float>, Isa::scalar>() {
  return &scalar::NormKernels<scalar::Arch, float>::table();
}

const NormTable<double>& norm_table_f64() {
  return scalar::NormKernels<ScalarArch<double>, double>::table();
}

}  // namespace hp::kernels
