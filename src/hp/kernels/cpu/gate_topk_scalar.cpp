#define HP_ISA scalar
#include "hp/kernels/cpu/gate_topk_impl.h"

template <>
const hp::kernels::GateTopKTable*
hp::kernels::isa_table<hp::kernels::GateTopKTable, hp::kernels::Isa::scalar>() {
  static constexpr GateTopKTable t{&scalar::gate_topk_impl, &scalar::gate_sigmoid_topk_impl};
  return &t;
}
