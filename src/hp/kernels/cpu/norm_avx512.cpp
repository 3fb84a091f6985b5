#define HP_ISA avx512
#include "hp/kernels/cpu/norm_impl.h"

HP_KERNEL_ENTRY(hp::kernels::NormTable<float>, HP_ISA::NormKernels<HP_ISA::Arch, float>::table());
