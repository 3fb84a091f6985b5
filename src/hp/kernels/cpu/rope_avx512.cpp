#define HP_ISA avx512
#include "hp/kernels/cpu/rope_impl.h"

void hp::kernels::detail::rope_row_avx512(const float* x, const float* c, const float* s, float* y,
                                          int64_t half, bool interleaved) {
  avx512::RopeRow::rotate(x, c, s, y, half, interleaved);
}
