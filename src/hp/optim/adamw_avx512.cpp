#define HP_ISA avx512
#include "hp/optim/adamw_impl.h"

void hp::optim::detail::adamw_update_avx512(float* p, const float* g, float* m, float* v, int64_t n,
                                            const AdamWStep& s) {
  kernels::avx512::AdamWKernel::update(p, g, m, v, n, s);
}
