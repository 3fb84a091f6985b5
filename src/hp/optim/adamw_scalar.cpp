#define HP_ISA scalar
#include "hp/optim/adamw_impl.h"

template <>
const hp::optim::AdamWTable*
hp::kernels::isa_table<hp::optim::AdamWTable, hp::kernels::Isa::scalar>() {
  static constexpr optim::AdamWTable t{&scalar::AdamWKernel::update};
  return &t;
}
