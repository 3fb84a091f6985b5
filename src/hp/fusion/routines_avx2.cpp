#define HP_ISA avx2
#include "hp/fusion/routines_impl.h"

template <>
const hp::fusion::RoutineTable*
hp::kernels::isa_table<hp::fusion::RoutineTable, hp::kernels::Isa::avx2>() {
  return &avx2::routine_table();
}
