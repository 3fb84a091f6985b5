// Manifold-constrained hyper-connections (mHC; DeepSeek-V4, transformers' DeepseekV4HyperConnection
// and DeepseekV4HyperHead): the residual of every decoder layer is N = hc_mult streams
// [B, T, N, D] instead of one [B, T, D].
//
// Before a block, HyperConnection reads the streams and gives
//   pre  [B, T, N]    = sigmoid(mix_pre · scale[0] + base_pre) + eps   (collapses streams → input)
//   post [B, T, N]    = 2 · sigmoid(mix_post · scale[1] + base_post)    (expands the output)
//   comb [B, T, N, N] = Sinkhorn(softmax(mix_comb · scale[2] + base_comb) + eps), iters rounds of
//                       column then row normalization (doubly stochastic)
// where mix = fn · rms(flatten(streams)) (one linear, fn [(2 + N)·N, N·D]); then
//   streams' = post ⊗ block(norm(Σ_n pre_n · stream_n)) + combᵀ · streams
// with norm the layer's input_layernorm / post_attention_layernorm.
// By default mix (with the norm) and fold run as MegaMHC (mhc_fused.h): fused row passes with an
// analytic backward. mix_composed / fold_composed are the same math composed from differentiable
// ops (the backward from the tape): the reference for tests and bench_mhc. A norm with a forward
// wrapper of its own (TP, recompute, FSDP gathering), which must see its input, runs after the fused
// collapse.
#pragma once

#include <memory>

#include "hp/core/tensor.h"
#include "hp/ops/mhc_fused.h"
#include "hp/nn/module.h"

namespace hp::models {

struct HcMix {
  Tensor post;   // [B, T, N] f32
  Tensor comb;   // [B, T, N, N] f32
  Tensor input;  // [B, T, D]: the block's input, norm(Σ_n pre_n · stream_n)
};

// FQNs fn, base, scale (transformers' attn_hc / ffn_hc).
class HyperConnection : public nn::Module {
 public:
  HyperConnection(int64_t hc_mult, int64_t hidden, int64_t sinkhorn_iters, double hc_eps,
                  double norm_eps, DType dt, double init_std);
  // streams [B, T, N, D] → the block's input (normed by `norm`) and the weights that fold its
  // output back. MegaMHC unless the streams are neither f32 nor bf16.
  HcMix mix(const Tensor& streams, const nn::RMSNorm& norm) const;
  HcMix mix_composed(const Tensor& streams, const nn::RMSNorm& norm) const;
  // post ⊗ out + combᵀ · streams: out [B, T, D] → new streams [B, T, N, D] (MegaMHC's fold).
  static Tensor fold(const HcMix& m, const Tensor& out, const Tensor& streams);
  static Tensor fold_composed(const HcMix& m, const Tensor& out, const Tensor& streams);
  Tensor fn, base, scale;

 private:
  MhcSpec spec_;  // norm_eps is the block norm's, taken from it at each call
};

// The final collapse (FQNs hc_fn, hc_base, hc_scale): Σ_n pre_n · stream_n with
// pre = sigmoid(hc_fn · rms(flatten(streams)) · hc_scale + hc_base) + eps.
class HyperHead : public nn::Module {
 public:
  HyperHead(int64_t hc_mult, int64_t hidden, double hc_eps, double norm_eps, DType dt,
            double init_std);
  Tensor forward(const Tensor& streams) const;  // [B, T, N, D] → [B, T, D]
  Tensor hc_fn, hc_base, hc_scale;

 private:
  int64_t n_;
  double hc_eps_, norm_eps_;
};

// The weights Σ_n pre[..., n] · streams[..., n, :]: pre [B, T, N], streams [B, T, N, D].
Tensor collapse_streams(const Tensor& pre, const Tensor& streams);

}  // namespace hp::models
