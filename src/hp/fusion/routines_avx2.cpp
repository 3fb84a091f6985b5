#define HP_ISA avx2
#include "hp/fusion/routines_impl.h"

HP_KERNEL_ENTRY(hp::fusion::RoutineTable, HP_ISA::routine_table());
