#define HP_ISA avx512
#include "hp/optim/adamw_impl.h"

template <>
const hp::optim::AdamWTable*
hp::kernels::isa_table<hp::optim::AdamWTable, hp::kernels::Isa::avx512>() {
  static constexpr optim::AdamWTable t{&avx512::AdamWKernel::update};
  return &t;
}
