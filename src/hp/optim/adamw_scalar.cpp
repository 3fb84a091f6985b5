#define HP_ISA scalar
#include "hp/optim/adamw_impl.h"

void hp::optim::detail::adamw_update_scalar(float* p, const float* g, float* m, float* v, int64_t n,
                                            const AdamWStep& s) {
  kernels::scalar::AdamWKernel::update(p, g, m, v, n, s);
}
