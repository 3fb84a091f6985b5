#define HP_ISA avx2
#include "hp/optim/adamw_impl.h"

void hp::optim::detail::adamw_update_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                          const AdamWStep& s) {
  kernels::avx2::AdamWKernel::update(p, g, m, v, n, s);
}
