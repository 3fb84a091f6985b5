#define HP_ISA avx2
#include "hp/kernels/cpu/ew_impl.h"

const hp::kernels::EwTable& hp::kernels::ew_table_avx2() { return avx2::table(); }
