#define HP_ISA avx512
#include "hp/kernels/cpu/rope_impl.h"

HP_KERNEL_ENTRY(hp::kernels::RopeTable, HP_ISA::kRopeTable);
