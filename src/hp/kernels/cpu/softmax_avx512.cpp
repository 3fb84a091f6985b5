#define HP_ISA avx512
#include "hp/kernels/cpu/softmax_impl.h"

template <>
const hp::kernels::SoftmaxRowFns<float>*
hp::kernels::isa_table<hp::kernels::SoftmaxRowFns<float>, hp::kernels::Isa::avx512>() {
  return &avx512::softmax_fns();
}
