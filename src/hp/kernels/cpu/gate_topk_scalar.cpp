#define HP_ISA scalar
#include "hp/kernels/cpu/gate_topk_impl.h"

void hp::kernels::scalar::gate_topk(const float* c, const GateTopKShape& s,
                                   const GateTopKScratch& w) {
  gate_topk_impl(c, s, w);
}

void hp::kernels::scalar::gate_sigmoid_topk(const float* l, const float* bias, float* p, float* c,
                                           const GateTopKShape& s, const GateTopKScratch& w) {
  gate_sigmoid_topk_impl(l, bias, p, c, s, w);
}
