#define HP_ISA avx512
#include "hp/kernels/cpu/ew_impl.h"

template <>
const hp::kernels::EwTable* hp::kernels::isa_table<hp::kernels::EwTable, hp::kernels::Isa::avx512>() {
  return &avx512::table();
}
