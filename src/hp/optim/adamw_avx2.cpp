#define HP_ISA avx2
#include "hp/optim/adamw_impl.h"

template <>
const hp::optim::AdamWTable*
hp::kernels::isa_table<hp::optim::AdamWTable, hp::kernels::Isa::avx2>() {
  static constexpr optim::AdamWTable t{&avx2::AdamWKernel::update};
  return &t;
}
