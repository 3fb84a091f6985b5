// The router load-balancing loss across pipeline stages (pipeline_step.h).
//
// Hugging Face's MoE loss joins every sparse layer's router logits: with C_e the top-k
// assignments to expert e and R the rows over all layers, and S_e the summed softmax
// probabilities, loss = E · Σ_e C_e · S_e / R² (models/moe.h). Split over stages, S is a sum of
// stage parts S_s, and the gradient of the loss through stage s's logits is E · C / R² — the
// global counts, which only exist once the last stage has run the micro-batch. So, per
// micro-batch: each stage's forward adds its layers' (C_s, R_s, S_s values) to the running totals
// it received from the previous stage and sends them on; the last stage then holds C, R and the
// other stages' S: its loss term is E · Σ_e C_e · (S_last,e + S_earlier,e) / R², differentiable
// through its own S only, and it sends (C, R) back to every earlier stage. An earlier stage's
// output carries a node whose backward — run when the micro-batch's gradient comes back, after
// the last stage's forward — receives (C, R) and hands its S_s the gradient E · C / R² (times
// the coefficient and the micro-batch's weight). The summed gradients equal the one-rank loss's.
//
// The messages travel on a communicator of their own (a split of the pipeline group), tagged by
// stage and micro-batch, so they never meet the executor's.
#pragma once

#include <cstdint>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/pipeline/schedule.h"

namespace hp::models {
class CausalLM;
struct RouterStats;
}

namespace hp::train {

class StageRouterLoss {
 public:
  // `pp_comm`: the pipeline group (equal stages); collective over it (splits it).
  StageRouterLoss(models::CausalLM& model, const pipeline::Schedule& schedule,
                  const dist::CommPtr& pp_comm);
  // A stage other than the last ran micro-batch `mb` through layers [begin, end) into h; its
  // loss is scaled by `weight` (the micro-batch's share of the step's targets). Sends the running
  // totals on and returns h with the node that adds this stage's gradient in backward.
  Tensor stage_output(int64_t mb, int64_t stage, int64_t begin, int64_t end, const Tensor& h,
                      double weight);
  // The last stage ran layers [begin, end) of micro-batch `mb`: its loss term
  // (router_aux_loss_coef · the whole load-balancing loss, differentiable through these layers);
  // sends (C, R) to the earlier stages.
  Tensor last_stage_term(int64_t mb, int64_t begin, int64_t end);
  // After the step: waits for this rank's sends.
  void finish();

 private:
  // What `stage` received for `mb`: the running totals of the stages before it, [C (E), R,
  // S values (E)] (zeros for the first stage).
  std::vector<double> received(int64_t mb, int64_t stage);
  // Running totals `v` plus one stage's part.
  std::vector<double> plus(std::vector<double> v, const models::RouterStats& st) const;
  void send(const std::vector<double>& v, int64_t to_stage, int tag);
  int forward_tag(int64_t mb, int64_t stage) const;
  int totals_tag(int64_t mb, int64_t stage) const;

  models::CausalLM& model_;
  const pipeline::Schedule& schedule_;
  dist::CommPtr comm_;
  int64_t experts_ = 0, top_k_ = 0;
  double coef_ = 0;
  std::vector<std::pair<dist::WorkPtr, Tensor>> sends_;  // with their buffers, until finish()
};

}  // namespace hp::train
