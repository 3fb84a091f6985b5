#define HP_ISA avx2
#include "hp/kernels/cpu/softmax_impl.h"

const hp::kernels::SoftmaxRowFns<float>& hp::kernels::softmax_row_fns_avx2() {
  return avx2::softmax_fns();
}
