// The AdamW update kernel on raw f32 buffers: one fused elementwise pass (gradient scale,
// decoupled weight decay, moment updates, bias correction, parameter update) per ISA
// (adamw_impl.h). No std containers here: the ISA translation units include this header.
#pragma once

#include <cstdint>

#include "hp/kernels/registry.h"

namespace hp::optim {

// Per-step scalars of one AdamW parameter, computed by adamw_scalars (the lr and betas in double,
// the derived factors in float, as every kernel path uses them).
struct AdamWStep {
  float lr = 0;  // lr for this parameter at this step
  float beta1 = 0, beta2 = 0, eps = 0;
  float weight_decay = 0;           // decoupled: p *= 1 - lr·wd before the update
  float step_size = 0;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt = 0;  // sqrt(1 - beta2^t)
  // Derived: 1 - lr·wd, 1 - β1, 1 - β2, 1 / sqrt(1 - β2^t).
  float decay = 1, one_minus_beta1 = 0, one_minus_beta2 = 0, inv_bias_correction2_sqrt = 1;
  // Every gradient element is multiplied by this first (in float): the global-norm clip factor,
  // fused here instead of rewriting the gradients in a pass of their own; 1 leaves them exact.
  float grad_scale = 1;
};

// Scalars for step t (1-based, after incrementing) with the torch.optim.AdamW formulas.
AdamWStep adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                        int64_t t, double grad_scale = 1.0);

// p, m, v updated in place over [0, n) (single-threaded: the caller splits ranges across threads),
// on the kernel registry's AdamWTable (adamw_impl.h; bitwise the same on every ISA). The same
// operation order as torch's single-tensor AdamW, with g ← g · grad_scale first:
//   p *= 1 - lr·wd;  m += (1-β1)(g - m);  v = β2·v + (1-β2)·g²;
//   p -= step_size · m / (sqrt(v) / sqrt(1-β2^t) + eps)
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);

// The per-ISA update kernel, a kernel family of kernels/registry.h.
struct AdamWTable {
  void (*update)(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);
};

}  // namespace hp::optim

namespace hp::kernels {
HP_KERNEL_FAMILY(optim::AdamWTable);
}  // namespace hp::kernels
