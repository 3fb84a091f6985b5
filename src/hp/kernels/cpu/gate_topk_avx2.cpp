#define HP_ISA avx2
#include "hp/kernels/cpu/gate_topk_impl.h"

template <>
const hp::kernels::GateTopKTable*
hp::kernels::isa_table<hp::kernels::GateTopKTable, hp::kernels::Isa::avx2>() {
  static constexpr GateTopKTable t{&avx2::gate_topk_impl, &avx2::gate_sigmoid_topk_impl};
  return &t;
}

// AVX-512 runs the AVX2 selection; no fused sigmoid pass (gate_topk.h).
template <>
const hp::kernels::GateTopKTable*
hp::kernels::isa_table<hp::kernels::GateTopKTable, hp::kernels::Isa::avx512>() {
  static constexpr GateTopKTable t{&avx2::gate_topk_impl, nullptr};
  return &t;
}
