#define HP_ISA avx512
#include "hp/kernels/cpu/softmax_impl.h"

const hp::kernels::SoftmaxRowFns<float>& hp::kernels::softmax_row_fns_avx512() {
  return avx512::softmax_fns();
}
