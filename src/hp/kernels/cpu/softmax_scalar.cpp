#define HP_ISA scalar
#include "hp/kernels/cpu/softmax_impl.h"

namespace hp::kernels {

const SoftmaxRowFns<float>& softmax_row_fns_scalar() {
  return scalar::softmax_fns();
}

const SoftmaxRowFns<double>& softmax_row_fns_f64() {
  static const SoftmaxRowFns<double> t = scalar::SoftmaxRows<ScalarArch<double>, double>::fns();
  return t;
}

const SoftmaxRowFns<float>& softmax_row_fns(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return softmax_row_fns_avx512();
    case Isa::avx2:
      return softmax_row_fns_avx2();
    case Isa::scalar:
      break;
  }
  return softmax_row_fns_scalar();
}

}  // namespace hp::kernels
