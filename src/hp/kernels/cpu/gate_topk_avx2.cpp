#define HP_ISA avx2
#include "hp/kernels/cpu/gate_topk_impl.h"

HP_KERNEL_ENTRY(hp::kernels::GateTopKTable, HP_ISA::kGateTopKTable);

// AVX-512 runs the AVX2 selection and has no fused sigmoid row (gate_topk.h).
template <>
const hp::kernels::GateTopKTable*
hp::kernels::isa_table<hp::kernels::GateTopKTable, hp::kernels::Isa::avx512>() {
  static constexpr GateTopKTable kAvx512{&avx2::gate_topk_impl, nullptr};
  return &kAvx512;
}
