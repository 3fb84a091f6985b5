#define HP_ISA avx2
#include "hp/kernels/cpu/softmax_impl.h"

template <>
const hp::kernels::SoftmaxRowFns<float>*
hp::kernels::isa_table<hp::kernels::SoftmaxRowFns<float>, hp::kernels::Isa::avx2>() {
  return &avx2::softmax_fns();
}
