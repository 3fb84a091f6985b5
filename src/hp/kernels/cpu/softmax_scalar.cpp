#define HP_ISA scalar
#include "hp/kernels/cpu/softmax_impl.h"

namespace hp::kernels {

template <>
const SoftmaxRowFns<float>* isa_table<SoftmaxRowFns<float>, Isa::scalar>() {
  return &scalar::softmax_fns();
}

const SoftmaxRowFns<double>& softmax_row_fns_f64() {
  static const SoftmaxRowFns<double> t = scalar::SoftmaxRows<ScalarArch<double>, double>::fns();
  return t;
}

}  // namespace hp::kernels
