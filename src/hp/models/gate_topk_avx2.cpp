#define HP_ISA avx2
#include "hp/models/gate_topk_impl.h"

void hp::models::avx2::gate_topk(const float* c, const GateTopKShape& s,
                                 const GateTopKScratch& w) {
  gate_topk_impl(c, s, w);
}
