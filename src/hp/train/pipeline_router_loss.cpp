// The router load-balancing loss across pipeline stages (pipeline_router_loss.h).
#include "hp/train/pipeline_router_loss.h"

#include <any>
#include <functional>

#include "hp/autograd/function.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/error.h"
#include "hp/models/moe.h"
#include "hp/models/transformer.h"
#include "hp/ops/ops.h"

namespace hp::train {

namespace {

// {h, prob_sum [E]} → {h}; its backward passes h's gradient through and gives prob_sum the
// gradient ctx.state (a std::function<Tensor()>) returns then.
struct RouterShareGrad {
  static constexpr const char* kName = "PipelineRouterShare";
  static std::vector<Tensor> forward(autograd::FunctionCtx&, const std::vector<Tensor>& in) {
    return {in[0]};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& g) {
    const auto& prob_grad = std::any_cast<const std::function<Tensor()>&>(ctx.state);
    return {g[0], prob_grad()};
  }
};

}  // namespace

StageRouterLoss::StageRouterLoss(models::CausalLM& model, const pipeline::Schedule& schedule,
                                 const dist::CommPtr& pp_comm)
    : model_(model),
      schedule_(schedule),
      comm_(pp_comm->split(0, pp_comm->rank())),
      experts_(model.config().num_experts),
      top_k_(model.config().num_experts_per_tok),
      coef_(model.config().router_aux_loss_coef) {
  // Tags below MPI's guaranteed 32767: forward S·M, totals S·M more.
  HP_CHECK(2 * schedule_.num_stages * schedule_.spec.microbatches <= 32767, "too many tags");
}

int StageRouterLoss::forward_tag(int64_t mb, int64_t stage) const {
  return static_cast<int>(stage * schedule_.spec.microbatches + mb);
}

int StageRouterLoss::totals_tag(int64_t mb, int64_t stage) const {
  return static_cast<int>((schedule_.num_stages + stage) * schedule_.spec.microbatches + mb);
}

void StageRouterLoss::send(const std::vector<double>& v, int64_t to_stage, int tag) {
  const Tensor t = from_data<double>(v, {int64_t(v.size())});
  sends_.emplace_back(comm_->isend(t, static_cast<int>(schedule_.rank_of_stage(to_stage)), tag), t);
}

std::vector<double> StageRouterLoss::received(int64_t mb, int64_t stage) {
  const int64_t n = 2 * experts_ + 1;
  if (stage == 0) return std::vector<double>(size_t(n), 0.0);
  return comm_
      ->recv({n}, DType::f64, static_cast<int>(schedule_.rank_of_stage(stage - 1)),
             forward_tag(mb, stage - 1))
      .to_vector();
}

std::vector<double> StageRouterLoss::plus(std::vector<double> v,
                                          const models::RouterStats& st) const {
  const auto e = static_cast<size_t>(experts_);
  const std::vector<double> s =
      st.prob_sum.defined() ? st.prob_sum.detach().to_vector() : std::vector<double>(e, 0.0);
  for (size_t i = 0; i < e; ++i) {
    v[i] += st.counts[i];
    v[e + 1 + i] += s[i];
  }
  v[e] += st.rows;
  return v;
}

Tensor StageRouterLoss::stage_output(int64_t mb, int64_t stage, int64_t begin, int64_t end,
                                     const Tensor& h, double weight) {
  const models::RouterStats st = models::router_stats(model_.router_logits(begin, end), experts_,
                                                      top_k_);
  send(plus(received(mb, stage), st), stage + 1, forward_tag(mb, stage));
  // No sparse layer on this stage, or no backward (validation).
  if (!st.prob_sum.defined() || !autograd::grad_enabled()) return h;
  const int last = static_cast<int>(schedule_.rank_of_stage(schedule_.num_stages - 1));
  const int tag = totals_tag(mb, stage);
  const int64_t experts = experts_;
  const double coef = coef_;
  dist::CommPtr comm = comm_;
  // d(weight · coef · E · Σ_e C_e · S_e / R²) / dS = weight · coef · E · C / R², rounded as the
  // one-rank loss's backward rounds it: f32 products in the order of its nodes (the micro-batch's
  // weight, the coefficient, E / R², then C), so every stage's gradient is bitwise that one.
  std::function<Tensor()> prob_grad = [comm, last, tag, experts, coef, weight] {
    const std::vector<double> v =
        comm->recv({experts + 1}, DType::f64, last, tag).to_vector();  // [C (E), R]
    const double r = v[size_t(experts)];
    float g = static_cast<float>(weight);
    g = g * static_cast<float>(coef);
    g = g * static_cast<float>(double(experts) / (r * r));
    std::vector<float> out(static_cast<size_t>(experts));
    for (size_t e = 0; e < out.size(); ++e) out[e] = g * static_cast<float>(v[e]);
    return from_data<float>(out, {experts});
  };
  return autograd::apply_function<RouterShareGrad>({h, st.prob_sum}, std::move(prob_grad))[0];
}

Tensor StageRouterLoss::last_stage_term(int64_t mb, int64_t begin, int64_t end) {
  const int64_t stage = schedule_.num_stages - 1;
  const models::RouterStats st = models::router_stats(model_.router_logits(begin, end), experts_,
                                                      top_k_);
  const auto e = static_cast<size_t>(experts_);
  const std::vector<double> before = received(mb, stage);  // [C, R, S] of the earlier stages
  const std::vector<double> v = plus(before, st);
  const std::vector<double> counts(v.begin(), v.begin() + experts_);
  const double rows = v[e];
  std::vector<double> totals(counts);
  totals.push_back(rows);
  // (Without a backward — validation — the earlier stages wait for no totals.)
  if (autograd::grad_enabled())
    for (int64_t t = 0; t < stage; ++t) send(totals, t, totals_tag(mb, t));
  // The earlier stages' S as a constant: the loss's value is the whole loss; its gradient reaches
  // this stage's logits only (the others get theirs from the totals just sent).
  const std::vector<double> earlier(before.begin() + experts_ + 1, before.end());
  Tensor term = models::load_balancing_share(counts, rows, from_vector(earlier, {experts_}),
                                             experts_);
  if (st.prob_sum.defined())
    term = add(models::load_balancing_share(counts, rows, st.prob_sum, experts_), term);
  return mul(term, coef_);
}

void StageRouterLoss::finish() {
  for (auto& [work, buffer] : sends_) work->wait();
  sends_.clear();
}

}  // namespace hp::train
