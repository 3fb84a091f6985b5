#define HP_ISA avx2
#include "hp/kernels/cpu/rope_impl.h"

template <>
const hp::kernels::RopeTable*
hp::kernels::isa_table<hp::kernels::RopeTable, hp::kernels::Isa::avx2>() {
  static constexpr RopeTable t{&avx2::RopeRow::rotate};
  return &t;
}
