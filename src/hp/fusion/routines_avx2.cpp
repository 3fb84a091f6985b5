#define HP_ISA avx2
#include "hp/fusion/routines_impl.h"

const hp::fusion::RoutineTable& hp::fusion::routine_table_avx2() {
  return hp::kernels::avx2::routine_table();
}
