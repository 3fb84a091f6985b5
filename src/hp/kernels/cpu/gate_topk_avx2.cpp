#define HP_ISA avx2
#include "hp/kernels/cpu/gate_topk_impl.h"

void hp::kernels::avx2::gate_topk(const float* c, const GateTopKShape& s,
                                 const GateTopKScratch& w) {
  gate_topk_impl(c, s, w);
}

void hp::kernels::avx2::gate_sigmoid_topk(const float* l, const float* bias, float* p, float* c,
                                         const GateTopKShape& s, const GateTopKScratch& w) {
  gate_sigmoid_topk_impl(l, bias, p, c, s, w);
}
