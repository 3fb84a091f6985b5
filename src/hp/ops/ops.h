// The differentiable op front-end: checks → kernel → tape (docs/ARCHITECTURE.md §2, §3).
//
// Every op validates its inputs (errors "[op] ..." name shapes and dtypes), runs a kernel from
// hp/kernels/cpu, and — when an input requires grad and grad mode is on — records its backward
// through autograd::record, in the same function, so each op's backward is defined in one place.
// Floating dtypes: f32, bf16, f16 compute in f32; f64 computes in f64 (gradient checks).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hp/core/random.h"
#include "hp/core/tensor.h"

namespace hp {

using Dims = std::vector<int64_t>;

// ---------- elementwise (broadcasting, dtype promotion) ----------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Scalar forms keep a's dtype.
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor silu(const Tensor& a);
// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& a, const std::string& approximate = "none");
Tensor relu(const Tensor& a);
Tensor clamp(const Tensor& a, double lo, double hi);
// cond (bool/u8) ? a : b, broadcasting all three; gradient flows to a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Differentiable dtype conversion (gradient converted back).
Tensor cast(const Tensor& a, DType dt);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }

// ---------- views and shape ops (share storage where possible) ----------
Tensor reshape(const Tensor& a, const Shape& shape);  // one dim may be -1; copies if needed
Tensor view(const Tensor& a, const Shape& shape);     // never copies; throws if impossible
Tensor permute(const Tensor& a, const Dims& order);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& a, int64_t dim, int64_t index);  // removes dim
Tensor expand(const Tensor& a, const Shape& shape);           // broadcast view (-1 keeps a dim)
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& a);  // differentiable; returns a itself when already contiguous

// ---------- reductions (fixed summation order: thread-count independent) ----------
Tensor sum(const Tensor& a, const Dims& dims, bool keepdim = false);
Tensor sum(const Tensor& a);  // all elements → 0-d
Tensor mean(const Tensor& a, const Dims& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
// Sums a broadcast gradient back to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);
// Max over one dim: values (differentiable) and i64 indices (first occurrence).
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
// Max over dims; gradient split evenly among tied maxima (as torch.amax).
Tensor amax(const Tensor& a, const Dims& dims, bool keepdim = false);
Tensor logsumexp(const Tensor& a, const Dims& dims, bool keepdim = false);
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);

// ---------- linear algebra ----------
// Batched with broadcasting over leading dims; 1-D operands as in numpy. f32, or bf16 inputs with
// f32 accumulation (bf16 output).
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] · w[out, in]ᵀ + b[out]. Its backward writes dW contiguous [out, in]
// (linear_weight_grad) and dX = dY · W, both without copying a transposed operand.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
// dW [out, in] = dy2ᵀ · x2 for x2 [N, in], dy2 [N, out], contiguous: linear's weight gradient, also
// for callers that defer it (pipeline/weight_grad.h). Not differentiable.
Tensor linear_weight_grad(const Tensor& x2, const Tensor& dy2);

// ---------- neural-network ops ----------
// ids (i32/i64, any shape) → [..., dim]; out-of-range ids throw IndexError naming the id.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// x · rsqrt(mean(x²) + eps) · w over the last dim (HF LlamaRMSNorm, computed in f32 for
// f32/bf16/f16 x and rounded once to x's dtype). weight [D] or undefined (ones). Fused kernels;
// saves x, weight and the per-row rstd.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
// (x - mean) · rsqrt(var + eps) · w + b over the last dim (biased var, as torch). weight, bias [D]
// or undefined. Saves x, weight and the per-row mean and rstd.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Rotary embedding of x [B, H, T, D] (seq_dim=2) or [B, T, H, D] (seq_dim=1) — any x whose dim
// seq_dim holds the T positions — by cos/sin [T, D/2] (cos/sin of the angle of position t and
// frequency i, e.g. from rope_cos_sin), or per row by cos/sin [B, T, D/2] (B = x.shape[0],
// seq_dim >= 1: positions that restart at each packed document). interleaved=false is HF's
// rotate_half convention (pairs
// (i, i + D/2)), true the GPT-J one (pairs (2i, 2i + 1)). Gradient flows to x only.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved = false,
                        int64_t seq_dim = 2);
// {cos, sin} [T, D/2] of t · base^(-2i/D), computed in double and rounded to dt.
std::pair<Tensor, Tensor> rope_cos_sin(int64_t seq_len, int64_t head_dim, double theta_base = 10000.0,
                                       DType dt = DType::f32);
// {cos, sin} [T, D/2] of positions start..start+T-1 times inv_freq[i] (D/2 entries, e.g. a
// scaled-RoPE frequency vector), multiplied by `scale` (YaRN's attention factor); double math.
std::pair<Tensor, Tensor> rope_cos_sin_from_inv_freq(const std::vector<double>& inv_freq,
                                                     int64_t start, int64_t seq_len,
                                                     double scale = 1.0, DType dt = DType::f32);
// q [B, Hq, T, D], k/v [B, Hkv, S, D]; grouped-query when Hq > Hkv; flash-style blocked kernel.
// `segments` (packed documents): i32/i64 [B, T] document ids, non-decreasing along each row, with
// S == T; query i then sees key j only when both have the same id (block-diagonal, causal or not).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = true, std::optional<double> scale = std::nullopt,
                                    const Tensor& segments = Tensor());
// logits [N, V], targets [N] (i64/i32); mean over targets != ignore_index (reduction "mean"),
// "sum" or "none" ([N]). Fused with log_softmax: no [N, V] probabilities kept for backward.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     const std::string& reduction = "mean");
// Largest k along dim (sorted descending): values (differentiable), i64 indices.
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
// a with src added at index along dim (out of place).
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
// Zeroes elements with probability p and scales the rest by 1/(1-p); identity when !training.
// Masks come from the default generator (replayed by recompute).
Tensor dropout(const Tensor& a, double p, bool training = true);

// ---------- random factories (default generator unless one is given) ----------
Tensor randn(const Shape& shape, DType dt = DType::f32, double mean = 0.0, double std = 1.0);
Tensor rand(const Shape& shape, DType dt = DType::f32, double lo = 0.0, double hi = 1.0);

}  // namespace hp
