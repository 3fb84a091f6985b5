#define HP_ISA scalar
#include "hp/kernels/cpu/rope_impl.h"

void hp::kernels::detail::rope_row_scalar(const float* x, const float* c, const float* s, float* y,
                                          int64_t half, bool interleaved) {
  scalar::RopeRow::rotate(x, c, s, y, half, interleaved);
}
