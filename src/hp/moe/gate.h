// MegaGate: the MoE router after its logit GEMM as one fused kernel with its backward — scores,
// bias-corrected (optionally group-limited) top-k selection, the selected weights' normalization
// and scaling, and the per-expert assignment counts — one pass per token row instead of a chain of
// [N, E] ops (softmax / sigmoid, topk, gather, sum, divide, multiply), each writing its output.
//
// Per row of logits l [E]:
//   scores   p = softmax(l) | sigmoid(l) | sqrt(softplus(l))
//   select   the top_k of c = p + bias (bias optional; ties: lower index first). Group-limited
//            (DeepSeek-V3): the experts split into n_group groups, each scored by the sum of its
//            top-2 c; only the topk_group best groups' experts compete. With softmax scores and no
//            bias the selection is the top_k of l itself (softmax is monotone).
//   weights  w_j = scaling · p_{i_j} / (Σ_j p_{i_j} + eps) with norm_topk_prob, else scaling · p_{i_j}
// The weights are differentiable w.r.t. the logits (the selection is not); the bias never gets a
// gradient. Rows run in parallel and independently: results do not depend on the thread count.
//
// Each row is scored, selected and weighted while it sits in cache, with the elementwise kernels'
// SIMD row functions and a SIMD selection (gate_topk.h: a bound from lane-wise top-2s, then only
// the values above it ranked; exactly the experts and order of inserting every value); no [N, E]
// scores tensor is written. A sigmoid row (DeepSeek-V3) is scored, bias-corrected and scanned for
// its groups' top-2s in one pass over the logits, with the elementwise kernels' own functors.
// The backward keeps only the logits, the selected scores [N, k] and, for softmax, each row's max
// and 1 / Σ exp(l − max) [N, 2], and recomputes a softmax row in cache (sigmoid and sqrt-softplus
// need only the selected entries).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::moe {

enum class GateScore { softmax, sigmoid, sqrt_softplus };
GateScore gate_score_from_name(const std::string& name);  // softmax | sigmoid | sqrtsoftplus

struct GateSpec {
  GateScore score = GateScore::softmax;
  int64_t top_k = 1;
  // Group-limited selection when n_group > 1 (DeepSeek-V3); topk_group groups are kept.
  int64_t n_group = 1, topk_group = 1;
  bool norm_topk_prob = false;
  double norm_eps = 0.0;  // added to the selected weights' sum (DeepSeek: 1e-20)
  double scaling = 1.0;   // routed_scaling_factor
};

struct GateOutput {
  Tensor weights;               // [N, top_k] f32, differentiable w.r.t. logits
  Tensor indices;               // [N, top_k] i64 expert ids
  std::vector<int64_t> counts;  // [E] assignments per expert
};

// logits [N, E] f32, bias [E] f32 or undefined. Throws ValueError("[moe] ...") naming the shapes
// or the spec value at fault.
GateOutput fused_gate(const Tensor& logits, const Tensor& bias, const GateSpec& spec);

// The same router as a chain of tensor ops (the implementation MegaGate replaced: softmax or
// sigmoid, topk or the selection loop — gate_topk.h's, row by row on p + bias as a tensor —,
// gather, sum, divide, multiply): the reference tests and bench_gate compare the fused kernel
// with. Softmax and sigmoid scores only.
GateOutput composed_gate(const Tensor& logits, const Tensor& bias, const GateSpec& spec);

}  // namespace hp::moe
