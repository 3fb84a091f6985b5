#define HP_ISA scalar
#include "hp/kernels/cpu/rope_impl.h"

template <>
const hp::kernels::RopeTable*
hp::kernels::isa_table<hp::kernels::RopeTable, hp::kernels::Isa::scalar>() {
  static constexpr RopeTable t{&scalar::RopeRow::rotate};
  return &t;
}
