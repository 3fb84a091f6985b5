// The optimizers' numeric kernels on raw f32 buffers (master weights, gradients, state).
//
// AdamW (adamw.h) is one fused elementwise pass, so results do not depend on how the range is split
// across threads. Muon's Newton–Schulz runs on the thread-count-independent gemm_f32 and a
// fixed-block norm reduction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hp/optim/adamw.h"

namespace hp::optim {

// Newton–Schulz coefficients of the quintic iteration (Keller Jordan's Muon).
inline constexpr float kNsA = 3.4445f, kNsB = -4.7750f, kNsC = 2.0315f;

// Approximate orthogonalization of g [rows, cols] (row-major) into out [rows, cols]: normalize by
// the Frobenius norm (+1e-7), transpose when rows > cols so the Gram matrix is the small side, run
// `steps` iterations X ← a·X + (b·A + c·A·A)·X with A = X·Xᵀ, and transpose back.
void newton_schulz(const float* g, float* out, int64_t rows, int64_t cols, int steps);

// Σ x² over the f32 buffers, in double: each buffer in fixed blocks of kSumSquaresBlock elements,
// every block summed in index order, the block sums added in buffer then block order, so the
// value does not depend on the thread count. One parallel pass over all buffers' blocks.
inline constexpr int64_t kSumSquaresBlock = 1 << 14;
double sum_of_squares(const std::vector<std::span<const float>>& buffers);

// Frobenius norm: sqrt(sum_of_squares) of one buffer.
double frobenius_norm(const float* x, int64_t n);

}  // namespace hp::optim
