#define HP_ISA avx512
#include "hp/fusion/routines_impl.h"

const hp::fusion::RoutineTable& hp::fusion::routine_table_avx512() {
  return hp::kernels::avx512::routine_table();
}
