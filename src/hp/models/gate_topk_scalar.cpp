#define HP_ISA scalar
#include "hp/models/gate_topk_impl.h"

void hp::models::scalar::gate_topk(const float* c, const GateTopKShape& s,
                                   const GateTopKScratch& w) {
  gate_topk_impl(c, s, w);
}
