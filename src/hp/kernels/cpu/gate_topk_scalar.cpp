#define HP_ISA scalar
#include "hp/kernels/cpu/gate_topk_impl.h"

HP_KERNEL_ENTRY(hp::kernels::GateTopKTable, HP_ISA::kGateTopKTable);
