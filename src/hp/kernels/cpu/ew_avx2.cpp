#define HP_ISA avx2
#include "hp/kernels/cpu/ew_impl.h"

template <>
const hp::kernels::EwTable* hp::kernels::isa_table<hp::kernels::EwTable, hp::kernels::Isa::avx2>() {
  return &avx2::table();
}
