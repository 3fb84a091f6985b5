// SwiGLU rows (swiglu.h). One definition, so every caller gets the same rounding.
#include "hp/kernels/cpu/swiglu.h"

#include <algorithm>
#include <cmath>

namespace hp::kernels {

void swiglu_f32(const float* g, const float* u, float* act, int64_t n, float limit) {
  if (limit > 0.0f) {
    for (int64_t j = 0; j < n; ++j) {
      const float gc = std::min(g[j], limit), uc = std::clamp(u[j], -limit, limit);
      act[j] = gc / (1.0f + std::exp(-gc)) * uc;
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) act[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
}

void swiglu_backward_f32(const float* g, const float* u, const float* dact, float* dg, float* du,
                         int64_t n, float limit) {
  if (limit > 0.0f) {
    for (int64_t j = 0; j < n; ++j) {
      const float gc = std::min(g[j], limit), uc = std::clamp(u[j], -limit, limit);
      const float sg = 1.0f / (1.0f + std::exp(-gc));
      du[j] = std::fabs(u[j]) > limit ? 0.0f : dact[j] * gc * sg;
      dg[j] = g[j] > limit ? 0.0f : dact[j] * uc * sg * (1.0f + gc * (1.0f - sg));
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const float sg = 1.0f / (1.0f + std::exp(-g[j]));
    du[j] = dact[j] * g[j] * sg;
    dg[j] = dact[j] * u[j] * sg * (1.0f + g[j] * (1.0f - sg));
  }
}

}  // namespace hp::kernels
