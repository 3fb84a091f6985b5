// The top-k selection of the ISA (gate_topk.h).
#include "hp/kernels/cpu/gate_topk.h"

namespace hp::kernels {

GateTopKFn gate_topk_fn(Isa isa) {
  return isa == Isa::scalar ? scalar::gate_topk : avx2::gate_topk;
}

GateSigmoidTopKFn gate_sigmoid_topk_fn(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return scalar::gate_sigmoid_topk;
    case Isa::avx2:
      return avx2::gate_sigmoid_topk;
    default:
      return nullptr;
  }
}

}  // namespace hp::kernels
