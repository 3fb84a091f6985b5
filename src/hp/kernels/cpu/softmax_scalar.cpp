#define HP_ISA scalar
#include "hp/kernels/cpu/softmax_impl.h"

namespace hp::kernels {

const SoftmaxRowFns<double>& softmax_row_fns_f64() {
  static const SoftmaxRowFns<double> t = scalar::SoftmaxRows<ScalarArch<double>, double>::fns();
  return t;
}

}  // namespace hp::kernels

HP_KERNEL_ENTRY(hp::kernels::SoftmaxRowFns<float>, HP_ISA::softmax_fns());
