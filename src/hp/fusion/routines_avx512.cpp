#define HP_ISA avx512
#include "hp/fusion/routines_impl.h"

template <>
const hp::fusion::RoutineTable*
hp::kernels::isa_table<hp::fusion::RoutineTable, hp::kernels::Isa::avx512>() {
  return &avx512::routine_table();
}
