// Runs one rank's pipeline schedule (schedule.h) for a training step (docs/ARCHITECTURE.md §4b).
//
// For every action of the rank's list, in order: F runs the stage's forward on a microbatch — the
// first stage on the input `first_input` gives (token ids), the others on the activation received
// from the previous stage (a fresh leaf that requires grad, so backward yields its gradient) — and
// keeps (input, output) until the backward; B seeds the output's backward with the gradient
// received from the next stage (the last stage's forward returns the scalar loss, seeded with 1)
// and hands the input's gradient back. Transfers are non-blocking sends (waited for at the end of
// the step) and receives that wait for their message; every message is a small header (dtype,
// shape) and the tensor, tagged by direction, microbatch and stage so their order never matters.
// Stages adjacent on one rank (interleaved with pp = 1) hand tensors over in memory.
//
// The split backward of zero-bubble schedules: I runs the backward under a WeightGradCapture, so
// the stage's deferred linears (weight_grad.h, installed by the caller) queue their weight
// gradients; W runs that microbatch's queue. Without deferred linears, I is the whole backward and
// W empty.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/pipeline/schedule.h"

namespace hp::pipeline {

// A tensor between stages travels as two messages: this header, [kTransferHeader] i64 =
// [dtype, ndim, dims ...], then the contiguous data. The executor and the inference forward over
// stages (train/pipeline_step.cpp) both speak it.
constexpr int64_t kTransferHeader = 8;
Tensor transfer_header(const Tensor& t);
// The shape and dtype a received header announces.
std::pair<Shape, DType> parse_transfer_header(const Tensor& header);

// A model chunk this rank runs: input → output for microbatch `mb` (the last stage: the scalar to
// backpropagate, e.g. the microbatch's loss scaled by its share of the step's targets).
struct StageFn {
  int64_t stage = 0;
  std::function<Tensor(int64_t mb, const Tensor& input)> forward;
};

// Where the pipeline ranks sit in the communicator when stages have different rank counts (MPMD):
// pipeline rank r is the comm ranks ranks[r] (its data-parallel ranks, in order), each holding its
// torch.chunk share of a microbatch's `rows` rows (dim 0); a transfer sends every overlap of a
// sender's rows with a receiver's, and the receiver joins its pieces in row order. Empty: pipeline
// rank r is comm rank r and tensors travel whole.
struct StagePlacement {
  std::vector<std::vector<int>> ranks;
  int64_t rows = 0;
};

// Time per step on this rank (seconds): computing (F and B), blocked in receives, and in all;
// and per stage ([num_stages], zero for the stages of other ranks) each compute action's seconds
// summed over the step's microbatches (Costs' forward / backward / backward_input /
// backward_weight), from which simulate() gives the schedule's bubble at the measured costs.
struct ExecutorStats {
  double compute_s = 0, wait_s = 0, total_s = 0;
  std::vector<Costs> stage_s;
};

class Executor {
 public:
  // `comm`: the pipeline group, rank r of it = pipeline rank r (schedule rank), or with a
  // placement the group of every stage's ranks; `stages`: one StageFn for every stage the
  // schedule places on this rank.
  Executor(Schedule schedule, dist::CommPtr comm, std::vector<StageFn> stages,
           StagePlacement placement = {});
  // Runs this rank's list once; first_input(mb) is stage 0's input for microbatch mb.
  ExecutorStats run(const std::function<Tensor(int64_t mb)>& first_input);
  const Schedule& schedule() const { return schedule_; }

 private:
  // Rows [begin, begin + count) of this rank's tensor that go to / come from comm rank `peer`
  // (count −1: the whole tensor).
  struct Piece {
    int peer = 0;
    int64_t begin = 0, count = -1;
  };
  // The pieces this rank exchanges with pipeline rank `other`, in row order.
  std::vector<Piece> pieces(int64_t other) const;
  // One run(): its transfers and the tensors kept between actions (executor.cpp).
  class Step;

  Schedule schedule_;
  dist::CommPtr comm_;
  std::vector<StageFn> stages_;
  StagePlacement placement_;
  int64_t rank_ = 0;  // this rank's pipeline rank
  // Receives posted at the step's start (HP_PP_RECV_AHEAD=1, the default) or when the action
  // needing them comes up (0: the ablation bench_pipeline measures against).
  bool recv_ahead_ = true;
};

}  // namespace hp::pipeline
