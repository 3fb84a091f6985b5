#define HP_ISA avx512
#include "hp/kernels/cpu/rope_impl.h"

template <>
const hp::kernels::RopeTable*
hp::kernels::isa_table<hp::kernels::RopeTable, hp::kernels::Isa::avx512>() {
  static constexpr RopeTable t{&avx512::RopeRow::rotate};
  return &t;
}
