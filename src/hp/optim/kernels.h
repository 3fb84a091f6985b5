// The optimizers' numeric kernels on raw f32 buffers (master weights, gradients, state).
//
// AdamW is one fused elementwise pass (decoupled weight decay, moment updates, bias correction,
// parameter update), so results do not depend on how the range is split across threads. Muon's
// Newton–Schulz runs on the thread-count-independent gemm_f32 and a fixed-block norm reduction.
#pragma once

#include <cstdint>

namespace hp::optim {

// Per-step scalars of one AdamW parameter, computed in double by the caller.
struct AdamWStep {
  float lr = 0;  // lr for this parameter at this step
  float beta1 = 0, beta2 = 0, eps = 0;
  float weight_decay = 0;           // decoupled: p *= 1 - lr·wd before the update
  float step_size = 0;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt = 0;  // sqrt(1 - beta2^t)
};

// Scalars for step t (1-based, after incrementing) with the torch.optim.AdamW formulas.
AdamWStep adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                        int64_t t);

// p, m, v updated in place over [0, n) (single-threaded: the caller splits ranges across threads).
// The same operation order as torch's single-tensor AdamW:
//   p *= 1 - lr·wd;  m += (1-β1)(g - m);  v = β2·v + (1-β2)·g²;
//   p -= step_size · m / (sqrt(v) / sqrt(1-β2^t) + eps)
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);

// Newton–Schulz coefficients of the quintic iteration (Keller Jordan's Muon).
inline constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;

// Approximate orthogonalization of g [rows, cols] (row-major) into out [rows, cols]: normalize by
// the Frobenius norm (+1e-7), transpose when rows > cols so the Gram matrix is the small side, run
// `steps` iterations X ← a·X + (b·A + c·A·A)·X with A = X·Xᵀ, and transpose back.
void newton_schulz(const float* g, float* out, int64_t rows, int64_t cols, int steps);

// Frobenius norm in double over fixed blocks combined in order (thread-count independent).
double frobenius_norm(const float* x, int64_t n);

}  // namespace hp::optim
