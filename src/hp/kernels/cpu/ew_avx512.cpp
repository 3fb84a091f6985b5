#define HP_ISA avx512
#include "hp/kernels/cpu/ew_impl.h"

const hp::kernels::EwTable& hp::kernels::ew_table_avx512() { return avx512::table(); }
