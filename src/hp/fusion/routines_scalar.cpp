#define HP_ISA scalar
#include "hp/fusion/routines_impl.h"

namespace hp::fusion {

bool chainable(kernels::EwOp op) {
  // Every functor: the backward helpers too (silu_bwd(x, dy·u) after the product, in bf16
  // regions one chain from the bf16 inputs to the bf16 output).
  return static_cast<int>(op) < kernels::kNumEwOps;
}

const RoutineTable& routine_table_scalar() {
  return kernels::scalar::routine_table();
}

const RoutineTable& routine_table(kernels::Isa isa) {
  switch (isa) {
    case kernels::Isa::avx512:
      return routine_table_avx512();
    case kernels::Isa::avx2:
      return routine_table_avx2();
    case kernels::Isa::scalar:
      break;
  }
  return routine_table_scalar();
}

}  // namespace hp::fusion
