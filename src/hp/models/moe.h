// Mixture-of-experts feed-forward blocks of Hugging Face architectures: Qwen3-MoE
// (Qwen3MoeSparseMoeBlock), Mixtral (MixtralSparseMoeBlock) and DeepSeek-V3 (DeepseekV3MoE).
//
// Parameter FQNs are those of transformers checkpoints (what `save_pretrained` writes): per-expert
// 2-D weights `experts.<e>.<gate|up|down>.weight` (Mixtral: w1 = gate, w3 = up, w2 = down), the
// router `gate.weight` [E, hidden], DeepSeek's `gate.e_score_correction_bias` [E] and
// `shared_experts.{gate,up,down}_proj.weight`. (transformers >= 5 fuses experts into 3-D
// `experts.gate_up_proj` / `experts.down_proj` in memory but converts back to these names on save.)
// The decoder layer registers the block as "mlp" (Mixtral checkpoints: "block_sparse_moe").
//
// Experts run as a grouped GEMM over the token-expert assignments sorted by expert (forward and
// backward in one autograd Function), never as per-expert matmuls over the whole batch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"
#include "hp/moe/gate.h"
#include "hp/models/transformer.h"
#include "hp/nn/module.h"

namespace hp::models {

enum class RouterKind {
  // softmax over all experts, top-k, optionally renormalized (Qwen3-MoE, Mixtral).
  softmax_topk,
  // sigmoid scores; selection by score + e_score_correction_bias, limited to the topk_group best
  // groups (group score = sum of its top-2); weights from the un-biased scores (DeepSeek-V3).
  sigmoid_group_topk,
};

// Checkpoint names of an expert's three projections.
struct ExpertNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
};

struct MoEOptions {
  int64_t hidden_size = 0;
  int64_t moe_intermediate_size = 0;  // per routed expert
  int64_t num_experts = 0;
  int64_t top_k = 0;  // num_experts_per_tok
  RouterKind router = RouterKind::softmax_topk;
  bool norm_topk_prob = false;         // renormalize the k selected weights to sum 1
  int64_t n_group = 1;                 // sigmoid_group_topk only
  int64_t topk_group = 1;              // sigmoid_group_topk only
  double routed_scaling_factor = 1.0;  // multiplies the routed weights (DeepSeek)
  int64_t n_shared_experts = 0;        // > 0: shared SwiGLU of moe_intermediate_size · n
  ExpertNames expert_names;
  DType dtype = DType::f32;
  double init_std = 0.02;

  static MoEOptions qwen3_moe(int64_t hidden, int64_t moe_intermediate, int64_t experts,
                              int64_t top_k, bool norm_topk_prob);
  // Mixtral always renormalizes (softmax over the top-k logits) and names experts w1/w3/w2.
  static MoEOptions mixtral(int64_t hidden, int64_t intermediate, int64_t experts, int64_t top_k);
  static MoEOptions deepseek_v3(int64_t hidden, int64_t moe_intermediate, int64_t experts,
                                int64_t top_k, int64_t n_group, int64_t topk_group,
                                bool norm_topk_prob, double routed_scaling_factor,
                                int64_t n_shared_experts);
};

// down(silu(gate(x)) · up(x)), bias-free; child names configurable (Mixtral's w1/w3/w2).
class SwiGLUMLP : public nn::Module {
 public:
  SwiGLUMLP(int64_t hidden, int64_t intermediate, const ExpertNames& names = {},
            DType dt = DType::f32, double init_std = 0.02);
  Tensor forward(const Tensor& x) const;  // [..., hidden] → [..., hidden]
  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
};

struct RouterOutput {
  Tensor logits;   // [N, E] (x's dtype), for the load-balancing loss
  Tensor weights;  // [N, k] f32, differentiable w.r.t. the router weight and x
  Tensor indices;  // [N, k] i64 expert ids
  std::vector<int64_t> counts;  // [E] assignments per expert
};

// The router's fused gate (moe/gate.h) for these options: softmax top-k (Qwen3-MoE, Mixtral), or
// sigmoid scores with group-limited, bias-corrected selection and scaled weights (DeepSeek-V3).
moe::GateSpec gate_spec(const MoEOptions& opt);

// The router ("gate"): the logit GEMM, then MegaGate (moe/gate.h); weight [E, hidden] and, for
// sigmoid_group_topk, the non-trainable
// e_score_correction_bias [E] (a buffer in transformers; listed with the parameters here so loaders
// find it by FQN; it never receives a gradient — DeepSeek updates it outside backprop).
class TopKRouter : public nn::Module {
 public:
  explicit TopKRouter(const MoEOptions& opt);
  RouterOutput route(const Tensor& x) const;  // x [N, hidden]
  Tensor weight, e_score_correction_bias;

 private:
  MoEOptions opt_;
};

struct MoEOutput {
  Tensor output;         // [..., hidden]
  Tensor router_logits;  // [N, E], N = tokens
};

// How the routed experts' rows travel under expert parallelism (parallel.moe): MegaMoE
// (moe/megamoe.h: the exchange and the experts as one Multicore plan per direction, over
// `groups` expert groups) or the sequential exchange (moe/expert_parallel.h). Both give bitwise
// equal results in f32. A grouped kernel (MX) always runs the sequential exchange.
struct ExpertParallelKernel {
  bool megamoe = true;
  int64_t groups = 2;
};

// A sparse FeedForward whose routed experts can run expert-parallel (MoEBlock; DeepseekV4MoE,
// models/deepseek_v4.h): the parallelize step's EP (train/parallelize.h) installs the group, then
// keeps only this rank's experts.
class ExpertParallelBlock {
 public:
  virtual ~ExpertParallelBlock() = default;
  virtual int64_t num_experts() const = 0;
  // This rank runs only its experts (moe::local_experts over `ep`) and the assignments travel
  // over `ep` (moe/expert_parallel.h) by `kernel` where the block supports it; null restores
  // every expert local. Throws once keep_local_experts has dropped the others.
  virtual void set_expert_parallel(dist::CommPtr ep, ExpertParallelKernel kernel) = 0;
  // After set_expert_parallel: unregisters the experts this rank does not run and drops them from
  // its expert list (null entries), so named_parameters(), FSDP, optimizers and checkpoints see
  // only the local ones, still under their global FQNs `experts.<e>`. Irreversible.
  virtual void keep_local_experts() = 0;
};

// The shared part of keep_local_experts: removes from `block`'s child list "experts" every expert
// outside this rank's range over `ep` (non-null) and nulls it in `experts`.
void drop_nonlocal_experts(nn::Module& block, std::vector<std::shared_ptr<SwiGLUMLP>>& experts,
                           const dist::CommPtr& ep);
// The check of set_expert_parallel: throws ValueError("[moe] ...") once experts were dropped.
void check_all_experts_held(const std::vector<std::shared_ptr<SwiGLUMLP>>& experts);

// A decoder layer's sparse FeedForward; remembers the router logits of its last forward so
// CausalLM::loss can add the load-balancing loss.
// Routed experts run as the fused f32 grouped_experts below, or, once a grouped kernel is set
// (nn::GroupedExperts; mx/convert.h sets mx_grouped_experts), as three kernel calls over the
// experts' weights stacked per forward into [E, out, in] (a differentiable stack: gradients reach
// each expert's own parameters), with SwiGLU, weighting and combine as ordinary ops in x's dtype.
class MoEBlock : public FeedForward, public nn::GroupedExperts, public ExpertParallelBlock {
 public:
  explicit MoEBlock(const MoEOptions& opt);
  Tensor forward(const Tensor& x) const override;
  Tensor router_logits() const override { return last_router_logits_; }
  std::vector<Tensor> side_outputs() const override { return {last_router_logits_}; }
  void set_side_outputs(const std::vector<Tensor>& t) override { last_router_logits_ = t.at(0); }
  void set_grouped_kernel(nn::GroupedKernel k) override { grouped_kernel_ = std::move(k); }
  bool has_grouped_kernel() const override { return static_cast<bool>(grouped_kernel_); }
  // x [..., hidden]; also returns the router logits for load_balancing_loss.
  MoEOutput forward_with_router(const Tensor& x) const;
  const MoEOptions& options() const { return opt_; }
  // Top-k assignments per expert [E] in the last forward (train/expert_balance.h counts them).
  const std::vector<int64_t>& last_expert_counts() const { return last_counts_; }
  // Expert parallelism (ExpertParallelBlock), by MegaMoE or the sequential exchange.
  int64_t num_experts() const override { return opt_.num_experts; }
  void set_expert_parallel(dist::CommPtr ep, ExpertParallelKernel kernel = {}) override;
  void keep_local_experts() override;

  std::shared_ptr<TopKRouter> gate;
  std::vector<std::shared_ptr<SwiGLUMLP>> experts;  // all E; null where keep_local_experts dropped
  std::shared_ptr<SwiGLUMLP> shared_experts;  // null unless n_shared_experts > 0

 private:
  // This rank's experts over rows sorted by them: xs [R, hidden] with counts[e] rows for each
  // (moe::LocalExperts), through grouped_kernel_ when set.
  Tensor run_local_experts(const Tensor& xs, const std::vector<int64_t>& counts) const;
  // The same experts with the exchange as MegaMoE (moe::ExpertExchange): the f32 experts (f32
  // or bf16 rows travel in their own dtype), or MX ones (mx::MxGroupedKernel) in x's and the block's dtypes (f32 or bf16); other grouped
  // kernels keep the sequential exchange (megamoe_runs false).
  bool megamoe_runs(const Tensor& x) const;
  Tensor run_megamoe(const Tensor& xs, const std::vector<int64_t>& count) const;

  MoEOptions opt_;
  nn::GroupedKernel grouped_kernel_;
  dist::CommPtr ep_;
  ExpertParallelKernel ep_kernel_;
  mutable Tensor last_router_logits_;
  mutable std::vector<int64_t> last_counts_;
};

// Σ_j weights[n, j] · expert_{indices[n, j]}(x[n]) for x [N, hidden] f32, weights [N, k] f32,
// indices [N, k] i64, and per-expert SwiGLU weights gate/up [I, hidden], down [hidden, I] (f32,
// contiguous). Grouped GEMM forward and backward; gradients flow to x, weights and every expert
// weight (zeros for experts no token chose). Bitwise independent of the thread count.
// swiglu_limit > 0: the SwiGLU clamp (DeepSeek-V4: gate <= limit, |up| <= limit before silu·up).
Tensor grouped_experts(const Tensor& x, const Tensor& weights, const Tensor& indices,
                       const std::vector<Tensor>& gate_w, const std::vector<Tensor>& up_w,
                       const std::vector<Tensor>& down_w, double swiglu_limit = 0.0);

// Switch/Mixtral auxiliary loss (transformers' load_balancing_loss_func without attention mask):
// with p = softmax(logits) and f_e = (top-k assignments to e) / rows over all layers' logits,
// num_experts · Σ_e f_e · mean_rows(p_e). Differentiable through p. Returns a 0-d f32 tensor.
//
// When the rows are split over ranks (context parallelism), `sum_over_ranks` adds a vector over
// them (no gradient): f and the row count are then the global ones and the result is this rank's
// share, num_experts · Σ_e f_e · (Σ of its p_e) / global rows, so the shares sum to the loss over
// all rows and each share's gradient is exactly that loss's gradient through this rank's logits.
using VectorSum = std::function<std::vector<double>(const std::vector<double>&)>;
Tensor load_balancing_loss(const std::vector<Tensor>& router_logits, int64_t num_experts,
                           int64_t top_k, const VectorSum& sum_over_ranks = nullptr);

// The two halves of load_balancing_loss, for a loss whose layers are split too (pipeline stages:
// train/pipeline_step.cpp). router_stats: some layers' top-k assignment counts [E] and rows (no
// gradient) and their summed softmax probabilities prob_sum [E] (f32, differentiable).
struct RouterStats {
  std::vector<double> counts;
  double rows = 0;
  Tensor prob_sum;
};
RouterStats router_stats(const std::vector<Tensor>& router_logits, int64_t num_experts,
                         int64_t top_k);
// num_experts · Σ_e counts_e · prob_sum_e / rows², with counts and rows over all of the loss's
// layers and rows, prob_sum of this part: the part's share of the loss.
Tensor load_balancing_share(const std::vector<double>& counts, double rows, const Tensor& prob_sum,
                            int64_t num_experts);

}  // namespace hp::models
