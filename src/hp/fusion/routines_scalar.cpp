#define HP_ISA scalar
#include "hp/fusion/routines_impl.h"

namespace hp::fusion {

bool chainable(kernels::EwOp op) {
  // Every functor: the backward helpers too (silu_bwd(x, dy·u) after the product, in bf16
  // regions one chain from the bf16 inputs to the bf16 output).
  return static_cast<int>(op) < kernels::kNumEwOps;
}

}  // namespace hp::fusion

HP_KERNEL_ENTRY(hp::fusion::RoutineTable, HP_ISA::routine_table());
