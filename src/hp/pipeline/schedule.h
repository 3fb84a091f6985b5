// Pipeline schedules as data (docs/ARCHITECTURE.md §4b "Pipeline parallelism").
//
// A schedule is, for every pipeline rank, the ordered list of actions it runs in one training
// step: forward F(mb, stage), backward B (or, split for zero bubble, backward-input I then
// backward-weight W), and the point-to-point transfers between ranks: SEND_F / RECV_F carry a
// stage's output activation to the next stage, SEND_B / RECV_B a stage's input gradient to the
// previous one. Stages are model chunks numbered 0 .. ranks · virtual_stages − 1 in model order;
// stage s lives on rank s % ranks (Megatron's loop placement: with virtual stages a rank holds
// chunks s, s + ranks, s + 2·ranks, ...).
//
// Builders (torchtitan / torch.distributed.pipelining and Megatron orders):
//   gpipe             all forwards, then all backwards
//   1f1b              ranks − 1 − r warm-up forwards, then one forward / one backward, then the
//                     remaining backwards (PipeDream-flush)
//   interleaved_1f1b  1f1b over virtual stages (Megatron: microbatches a multiple of ranks)
//   zb_h1             1f1b with the backward split into I (input gradient, on the critical path)
//                     and W (weight gradient), rank r deferring r W's to fill its cool-down bubble
//                     (zero-bubble H1: same activation memory as 1f1b)
//   zb_h2             zero-bubble H2 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): rank r's
//                     k-th group runs F_k, I_{k−d_r}, W_{k−L} (members out of 0..m−1 left out),
//                     with L = min(2(p−1), m−1) and d_r = min(2(p−1−r), L): up to p−1−r more
//                     warm-up forwards than 1f1b fill the start bubble, and rank r holds back
//                     L − d_r W's (2r when m ≥ 2p−1) for its tail, so the step is a parallelogram
//                     instead of a trapezoid; rank 0 keeps up to 2p−1 microbatches' activations
//                     (1f1b: p)
//
// simulate() is the validator: it runs the lists with sends that never block (isend) and receives
// that wait for their send, checks every dependency (a stage's input arrived, its output gradient
// arrived, W after I), that every microbatch runs F and B (or I and W) exactly once on every stage
// on the stage's rank, that every send has its receive, and that no rank waits forever; it throws
// ScheduleError naming the rank, the action and what it waits for. With per-action costs it gives
// the timeline, hence the schedule's bubble fraction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/core/error.h"

namespace hp::pipeline {

// A schedule list that cannot run (a missing transfer, a deadlock, a stage run twice).
class ScheduleError : public ValueError {
 public:
  using ValueError::ValueError;
};

enum class Op : uint8_t {
  forward,          // F: the stage's forward of a microbatch
  backward,         // B: input and weight gradients at once
  backward_input,   // I: the input gradient only (what the previous stage waits for)
  backward_weight,  // W: the weight gradient (after I)
  send_act,         // SEND_F: the stage's output activation → the next stage's rank
  recv_act,         // RECV_F: the stage's input activation ← the previous stage's rank
  send_grad,        // SEND_B: the gradient of the stage's input → the previous stage's rank
  recv_grad,        // RECV_B: the gradient of the stage's output ← the next stage's rank
};
// "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
const char* op_name(Op op);
bool is_compute(Op op);

struct Action {
  Op op = Op::forward;
  int64_t microbatch = 0;
  int64_t stage = 0;
  bool operator==(const Action&) const = default;
};
// "F3@s1", "RECV_B0@s2".
std::string to_string(const Action& a);

enum class ScheduleKind { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_h2 };
// The YAML names: gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_h2. Throws ValueError naming `key`
// otherwise.
ScheduleKind schedule_kind_from_name(const std::string& name,
                                     const std::string& key = "parallel.pipeline.schedule");
const char* schedule_kind_name(ScheduleKind k);
// Whether the schedule splits the backward into I and W (the zero-bubble ones).
bool splits_backward(ScheduleKind k);

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int64_t ranks = 1;           // pipeline ranks (parallel.pp)
  int64_t microbatches = 1;    // per step
  int64_t virtual_stages = 1;  // model chunks per rank (interleaved_1f1b only)
};

struct Schedule {
  ScheduleSpec spec;
  int64_t num_stages = 1;                    // ranks · virtual_stages
  std::vector<std::vector<Action>> actions;  // [rank] → the rank's actions in order

  int64_t rank_of_stage(int64_t stage) const { return stage % spec.ranks; }
  // The stages rank r holds, in model order.
  std::vector<int64_t> stages_of_rank(int64_t r) const;
};

// Builds the lists, transfers included. Throws ValueError naming the parallel.pipeline key for
// combinations the schedule does not support (1f1b-family schedules with fewer microbatches than
// ranks, interleaved without virtual stages or with microbatches not a multiple of ranks, virtual
// stages on another schedule).
Schedule build_schedule(const ScheduleSpec& spec);

// Model costs of the compute actions (transfers are free unless `transfer` > 0).
struct Costs {
  double forward = 1, backward = 2, backward_input = 1, backward_weight = 1, transfer = 0;
};

struct Timeline {
  double makespan = 0;
  std::vector<double> busy;  // [rank] time spent computing
  // [rank] → (start, end) of each of the rank's actions, in list order.
  std::vector<std::vector<std::pair<double, double>>> spans;
  // Idle share of ranks × makespan: 1 − Σ busy / (ranks · makespan).
  double bubble_fraction() const;
};

// Validates and runs the schedule on the model costs (see the header comment). Throws
// ScheduleError.
Timeline simulate(const Schedule& s, const Costs& costs = {});
// The same with each stage's own costs ([num_stages]): e.g. the per-action times measured in a
// step, where the first and last stages (embedding, head and loss) cost more than the others.
Timeline simulate(const Schedule& s, const std::vector<Costs>& stage_costs);
inline void validate(const Schedule& s) {
  simulate(s);
}

// The bubble of the schedule at unit costs (F = I = W = 1, B = 2, free transfers): GPipe and 1F1B
// (p−1)/(m+p−1), interleaved (p−1)/(v·m+p−1), ZB-H1 and ZB-H2 (p−1)/(3m+p−1) when m ≥ p (a step
// ends with a synchronization, so the last rank's (p−1)·F wait at the start is a floor; ZB-H2's
// zero bubble needs steps that overlap). They differ when W < F: at other costs with equal stages
// every rank idles (p−1)·x, out of (p−1)·x + m·(F+I+W), x = max(F, F+I−W) for ZB-H1 (m ≥ p) and
// max(F, F+I−2W) for ZB-H2 (m ≥ 2p−1), against F+I+W for 1F1B.
double theoretical_bubble(const ScheduleSpec& spec);

// Every rank's list, one line each: "rank 0: F0@s0 SEND_F0@s0 F1@s0 ...".
std::string format_actions(const Schedule& s);
// A chart of the compute actions at unit costs, one row per rank, one column per time unit
// ("F3" for a forward of microbatch 3, lower-case i / w for I / W, "." idle), with the bubble.
std::string draw(const Schedule& s);

}  // namespace hp::pipeline
