#define HP_ISA avx2
#include "hp/kernels/cpu/softmax_impl.h"

HP_KERNEL_ENTRY(hp::kernels::SoftmaxRowFns<float>, HP_ISA::softmax_fns());
