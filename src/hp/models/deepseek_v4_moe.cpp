// DeepSeek-V4's sparse MLP (transformers' DeepseekV4SparseMoeBlock): hash- or learned-routed
// experts with the SwiGLU clamp, plus one shared expert.
#include <cmath>
#include <limits>

#include "hp/autograd/grad_mode.h"
#include "hp/models/deepseek_v4.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"

namespace hp::models {

namespace {

class GateModule : public nn::Module {
 public:
  Tensor add(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
};

// sqrt(softplus(x)), softplus in its overflow-free form relu(x) + log(1 + exp(-|x|)).
Tensor sqrt_softplus(const Tensor& x) {
  return sqrt(add(relu(x), log(add(exp(neg(abs(x))), 1.0))));
}

// silu(min(gate, limit)) · clamp(up, ±limit); limit 0: no clamp.
Tensor clamped_swiglu(Tensor gate, Tensor up, double limit) {
  if (limit > 0) {
    gate = clamp(gate, -std::numeric_limits<double>::infinity(), limit);
    up = clamp(up, -limit, limit);
  }
  return mul(silu(gate), up);
}

}  // namespace

DeepseekV4MoE::DeepseekV4MoE(const ModelConfig& c, bool hash) : c_(c), hash_(hash) {
  const int64_t e = c.num_experts;
  // HF order: gate, experts, shared_experts.
  auto g = std::make_shared<GateModule>();
  gate_weight = g->add("weight", nn::init_skipped()
                                     ? empty({e, c.hidden_size}, c.dtype)
                                     : randn({e, c.hidden_size}, DType::f32, 0.0,
                                             c.initializer_range)
                                           .to(c.dtype));
  if (hash) {
    // Token id → its k experts (an i64 table in the checkpoint; f32 here, exact below 2^24, and
    // never given a gradient: the router's weights come from the scores, not from the table).
    // Initialized: the top k of uniform draws [V, E] per token, i.e. k distinct experts.
    const Shape table{c.vocab_size, c.num_experts_per_tok};
    tid2eid = g->add("tid2eid", nn::init_skipped()
                                    ? zeros(table, DType::f32)
                                    : cast(topk(rand({c.vocab_size, e}), c.num_experts_per_tok, -1)
                                               .second,
                                           DType::f32));
  } else {
    correction_bias = g->add("e_score_correction_bias", zeros({e}, DType::f32));
  }
  gate = register_module("gate", std::static_pointer_cast<nn::Module>(g));
  auto list = register_module("experts", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < e; ++i) {
    experts.push_back(std::make_shared<SwiGLUMLP>(c.hidden_size, c.moe_intermediate_size,
                                                  ExpertNames{}, c.dtype, c.initializer_range));
    list->append(experts.back());
  }
  // HF's shared expert is one SwiGLU of moe_intermediate_size (n_shared_experts is not read).
  shared_experts = register_module(
      "shared_experts", std::make_shared<SwiGLUMLP>(c.hidden_size, c.moe_intermediate_size,
                                                    ExpertNames{}, c.dtype, c.initializer_range));
}

Tensor DeepseekV4MoE::swiglu(const SwiGLUMLP& m, const Tensor& x) const {
  return m.down_proj->forward(
      clamped_swiglu(m.gate_proj->forward(x), m.up_proj->forward(x), c_.swiglu_limit));
}

Tensor DeepseekV4MoE::forward(const Tensor& x) const {
  return forward_tokens(x, AttentionContext());
}

Tensor DeepseekV4MoE::forward_tokens(const Tensor& x, const AttentionContext& ctx) const {
  const int64_t d = x.size(-1), n = x.numel() / d, k = c_.num_experts_per_tok,
                e_count = c_.num_experts;
  const Tensor flat = reshape(x, {n, d});
  const Tensor logits = linear(flat, gate_weight);  // [N, E]
  Tensor scores = c_.scoring_func == "sqrtsoftplus" ? sqrt_softplus(logits)
                  : c_.scoring_func == "sigmoid"    ? sigmoid(logits)
                                                    : softmax(logits, -1);
  if (scores.dtype() != DType::f32) scores = cast(scores, DType::f32);
  // Which experts: the token's hash row, or the top-k of score + correction bias (no gradient).
  std::vector<double> idx(static_cast<size_t>(n * k));
  if (hash_) {
    if (!ctx.ids.defined() || ctx.ids.numel() != n)
      HP_THROW(ValueError, "deepseek_v4",
               "hash-routed MoE (mlp_layer_types 'hash_moe') needs the token ids of the forward; "
               "got ",
               ctx.ids.defined() ? ctx.ids.desc() : std::string("none"), " for ", n, " tokens");
    const std::vector<double> ids = contiguous(ctx.ids).to_vector();
    const std::vector<double> table = contiguous(tid2eid).to_vector();
    const int64_t vocab = tid2eid.size(0);
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<int64_t>(ids[static_cast<size_t>(i)]);
      HP_CHECK(id >= 0 && id < vocab, "token id ", id, " outside tid2eid [", vocab, ", ", k, "]");
      for (int64_t j = 0; j < k; ++j) {
        const double ex = table[static_cast<size_t>(id * k + j)];
        if (!(ex >= 0 && ex < double(e_count)))
          HP_THROW(ValueError, "deepseek_v4", "tid2eid[", id, "][", j, "] = ", ex,
                   " is not an expert id below n_routed_experts = ", e_count);
        idx[static_cast<size_t>(i * k + j)] = std::round(ex);
      }
    }
  } else {
    autograd::NoGradGuard no_grad;
    idx = contiguous(topk(add(scores, correction_bias), k, -1).second).to_vector();
  }
  const Tensor index = from_vector(idx, {n, k}, DType::i64);
  Tensor weights = gather(scores, 1, index);  // [N, k]
  weights = mul(div(weights, add(sum(weights, {-1}, true), 1e-20)), c_.routed_scaling_factor);
  if (!hash_) last_router_logits_ = logits;

  Tensor out;
  if (grouped_kernel_ || ep_) {
    // Rows sorted by expert and exchanged under EP (moe/expert_parallel.h).
    out = moe::routed_experts(
        flat, weights, index, e_count,
        [this](const Tensor& xs, const std::vector<int64_t>& counts) {
          return run_local_experts(xs, counts);
        },
        ep_);
  } else {
    // The routed experts as one grouped GEMM over the assignments sorted by expert
    // (models/moe.h), the SwiGLU clamp fused in; f32 inside.
    const bool f32 = x.dtype() == DType::f32 && c_.dtype == DType::f32;
    auto as_f32 = [&](const Tensor& t) { return t.dtype() == DType::f32 ? t : cast(t, DType::f32); };
    std::vector<Tensor> gw, uw, dw;
    for (const auto& ex : experts) {
      gw.push_back(as_f32(ex->gate_proj->weight));
      uw.push_back(as_f32(ex->up_proj->weight));
      dw.push_back(as_f32(ex->down_proj->weight));
    }
    out = grouped_experts(as_f32(flat), weights, index, gw, uw, dw, c_.swiglu_limit);
    if (!f32) out = cast(out, x.dtype());
  }
  out = add(out, swiglu(*shared_experts, flat));
  return reshape(out, x.shape());
}

Tensor DeepseekV4MoE::run_local_experts(const Tensor& xs,
                                        const std::vector<int64_t>& counts) const {
  const moe::ExpertRange mine =
      ep_ ? moe::local_experts(c_.num_experts, ep_->size(), ep_->rank())
          : moe::ExpertRange{0, c_.num_experts};
  if (grouped_kernel_) {
    // The kernel (MXFP8) over the local experts' stacked weights [E_local, out, in].
    std::vector<int32_t> ends(counts.size());
    int64_t end = 0;
    for (size_t e = 0; e < counts.size(); ++e) ends[e] = static_cast<int32_t>(end += counts[e]);
    const Tensor group_ends = from_data<int32_t>(ends, {int64_t(counts.size())});
    auto stacked = [&](std::shared_ptr<nn::Linear> SwiGLUMLP::*proj) {
      std::vector<Tensor> w;
      for (int64_t e = 0; e < mine.count; ++e)
        w.push_back((*experts[size_t(mine.first + e)].*proj)->weight);
      return stack(w, 0);
    };
    const Tensor act =
        clamped_swiglu(grouped_kernel_(xs, group_ends, stacked(&SwiGLUMLP::gate_proj)),
                       grouped_kernel_(xs, group_ends, stacked(&SwiGLUMLP::up_proj)),
                       c_.swiglu_limit);
    return grouped_kernel_(act, group_ends, stacked(&SwiGLUMLP::down_proj));
  }
  std::vector<Tensor> parts;
  int64_t row = 0;
  for (int64_t e = 0; e < mine.count; ++e) {
    const int64_t m = counts[size_t(e)];
    if (m == 0) continue;
    parts.push_back(swiglu(*experts[size_t(mine.first + e)], narrow(xs, 0, row, m)));
    row += m;
  }
  if (parts.empty()) return xs;  // [0, D]: no rows reached this rank's experts
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

void DeepseekV4MoE::set_expert_parallel(dist::CommPtr ep, ExpertParallelKernel) {
  check_all_experts_held(experts);
  ep_ = std::move(ep);
}

void DeepseekV4MoE::keep_local_experts() { drop_nonlocal_experts(*this, experts, ep_); }

}  // namespace hp::models
