#define HP_ISA avx512
#include "hp/kernels/cpu/ew_impl.h"

HP_KERNEL_ENTRY(hp::kernels::EwTable, HP_ISA::table());
