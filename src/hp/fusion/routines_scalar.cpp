#define HP_ISA scalar
#include "hp/fusion/routines_impl.h"

namespace hp::fusion {

bool chainable(kernels::EwOp op) {
  using kernels::EwOp;
  if (kernels::ew_arity(op) == 1) return true;
  return op == EwOp::add || op == EwOp::sub || op == EwOp::mul || op == EwOp::div ||
         op == EwOp::maximum || op == EwOp::minimum;
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
