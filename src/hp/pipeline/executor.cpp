// The pipeline executor (executor.h).
#include "hp/pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <utility>

#include "hp/autograd/engine.h"
#include "hp/core/error.h"
#include "hp/core/profiler.h"
#include "hp/ops/ops.h"
#include "hp/pipeline/weight_grad.h"
#include "hp/shard/placement.h"

namespace hp::pipeline {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Tensor transfer_header(const Tensor& t) {
  HP_CHECK(t.dim() <= kTransferHeader - 2, "a ", t.dim(), "-d tensor between stages");
  std::vector<int64_t> h(kTransferHeader, 0);
  h[0] = static_cast<int64_t>(t.dtype());
  h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[size_t(d) + 2] = t.size(d);
  return from_data<int64_t>(h, {kTransferHeader});
}

std::pair<Shape, DType> parse_transfer_header(const Tensor& header) {
  const std::vector<double> v = header.to_vector();
  Shape shape;
  for (int64_t d = 0; d < int64_t(v[1]); ++d) shape.push_back(int64_t(v[size_t(d) + 2]));
  return {shape, static_cast<DType>(int(v[0]))};
}

Executor::Executor(Schedule schedule, dist::CommPtr comm, std::vector<StageFn> stages,
                   StagePlacement placement)
    : schedule_(std::move(schedule)),
      comm_(std::move(comm)),
      stages_(std::move(stages)),
      placement_(std::move(placement)) {
  const int64_t p = schedule_.spec.ranks;
  if (placement_.ranks.empty()) {
    HP_CHECK(p == 1 || (comm_ && comm_->size() == p), "pipeline group of ",
             comm_ ? comm_->size() : 0, " ranks for ", p, " pipeline ranks");
    rank_ = p == 1 ? 0 : comm_->rank();
  } else {
    HP_CHECK(static_cast<int64_t>(placement_.ranks.size()) == p && comm_);
    rank_ = -1;
    for (int64_t r = 0; r < p; ++r)
      for (int c : placement_.ranks[size_t(r)])
        if (c == comm_->rank()) rank_ = r;
    HP_CHECK(rank_ >= 0, "comm rank ", comm_->rank(), " holds no pipeline stage");
  }
  validate(schedule_);
  const std::vector<int64_t> mine = schedule_.stages_of_rank(rank_);
  HP_CHECK(stages_.size() == mine.size(), stages_.size(), " stage functions for ", mine.size(),
           " stages on rank ", rank_);
  for (size_t i = 0; i < mine.size(); ++i) HP_CHECK(stages_[i].stage == mine[i]);
  if (const char* v = std::getenv("HP_PP_RECV_AHEAD")) {
    const std::string on = v;
    if (on != "0" && on != "1")
      HP_THROW(ValueError, "pipeline", "HP_PP_RECV_AHEAD must be 0 or 1, got '", on, "'");
    recv_ahead_ = on == "1";
  }
  // Tags must fit MPI's guaranteed 32767.
  HP_CHECK(4 * schedule_.spec.microbatches * schedule_.num_stages <= 32767, "too many tags");
}

std::vector<Executor::Piece> Executor::pieces(int64_t other) const {
  if (placement_.ranks.empty()) return {{static_cast<int>(other), 0, -1}};
  const auto& mine = placement_.ranks[size_t(rank_)];
  const auto& theirs = placement_.ranks[size_t(other)];
  const auto me = std::find(mine.begin(), mine.end(), comm_->rank()) - mine.begin();
  const int64_t rows = placement_.rows;
  const shard::ChunkRange my = shard::chunk_range(rows, int64_t(mine.size()), me);
  std::vector<Piece> out;
  for (size_t j = 0; j < theirs.size(); ++j) {
    const shard::ChunkRange t = shard::chunk_range(rows, int64_t(theirs.size()), int64_t(j));
    const int64_t lo = std::max(my.start, t.start);
    const int64_t hi = std::min(my.start + my.length, t.start + t.length);
    if (hi > lo) out.push_back({theirs[j], lo - my.start, hi - lo});
  }
  return out;
}

// One run(): the step's transfers and the tensors kept between its actions, every action of the
// rank's list in turn (run_action), then the wait for the sends (finish).
class Executor::Step {
 public:
  Step(const Executor& executor, const std::function<Tensor(int64_t mb)>& first_input)
      : executor_(executor),
        schedule_(executor.schedule_),
        first_input_(first_input),
        rank_(executor.rank_),
        microbatches_(executor.schedule_.spec.microbatches),
        stages_(executor.schedule_.num_stages),
        start_s_(now_s()) {
    stats_.stage_s.assign(static_cast<size_t>(stages_), Costs{0, 0, 0, 0, 0});
  }

  // Receives are posted ahead: every header this rank receives in the step at its start, and a
  // message's data as soon as its header has arrived (pump(), between actions). A message then
  // travels while the rank computes; received only when the action needing it began (header, then
  // data: recv_ahead_ false), each cost about 0.25 ms of bubble on the tiny pipeline bench.
  void post_receives(const std::vector<Action>& actions) {
    for (const Action& a : actions) {
      if (a.op != Op::recv_act && a.op != Op::recv_grad) continue;
      const int dir = a.op == Op::recv_act ? 0 : 1;
      for (const Piece& piece :
           executor_.pieces(schedule_.rank_of_stage(a.stage + (dir == 0 ? -1 : 1)))) {
        const int th = tag(dir, a.microbatch, a.stage, 0);
        HP_CHECK(th + 1 == tag(dir, a.microbatch, a.stage, 1));
        inbound_[{piece.peer, th}].header =
            executor_.comm_->irecv({kTransferHeader}, DType::i64, piece.peer, th);
      }
    }
  }

  void run_action(const Action& a) {
    const Schedule& s = schedule_;
    pump();
    const Key key{a.microbatch, a.stage};
    // Profiled runs (hp train --profile) show every action on the rank's timeline ("pipeline
    // F3@s1"), as the forward or backward phase it belongs to.
    const bool fwd = a.op == Op::forward || a.op == Op::send_act || a.op == Op::recv_act;
    const profiler::Scope event(fwd ? profiler::Phase::forward : profiler::Phase::backward,
                                [&] { return "pipeline " + to_string(a); });
    switch (a.op) {
      case Op::recv_act:
        inbox_act_[key] = recv(s.rank_of_stage(a.stage - 1), 0, a.microbatch, a.stage);
        break;
      case Op::recv_grad:
        inbox_grad_[key] = recv(s.rank_of_stage(a.stage + 1), 1, a.microbatch, a.stage);
        break;
      case Op::send_act:
        send(saved_.at(key).output.detach(), s.rank_of_stage(a.stage + 1), 0, a.microbatch,
             a.stage + 1);
        break;
      case Op::send_grad:
        send(saved_.at(key).input.grad(), s.rank_of_stage(a.stage - 1), 1, a.microbatch,
             a.stage - 1);
        break;
      case Op::forward:
        forward(a, key);
        break;
      case Op::backward:
      case Op::backward_input:
        backward(a, key);
        break;
      case Op::backward_weight:
        backward_weight(a, key);
        break;
    }
    // A send was the last use of the stage's saved tensors.
    if (a.op == Op::send_grad) saved_.erase(key);
  }

  ExecutorStats finish() {
    const double t_wait = now_s();
    for (const auto& w : sends_) w->wait();
    stats_.wait_s += now_s() - t_wait;
    stats_.total_s = now_s() - start_s_;
    return std::move(stats_);
  }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (microbatch, stage)
  struct Saved {
    Tensor input, output;
  };
  struct Inbound {
    dist::WorkPtr header, data;
  };

  // dir 0: the activation entering `stage`; dir 1: the gradient of `stage`'s output.
  int tag(int dir, int64_t mb, int64_t stage, int part) const {
    return static_cast<int>(2 * ((dir * microbatches_ + mb) * stages_ + stage) + part);
  }

  const StageFn& stage_fn(int64_t stage) const {
    for (const StageFn& f : executor_.stages_)
      if (f.stage == stage) return f;
    HP_CHECK(false, "stage ", stage, " is not on rank ", rank_);
    return executor_.stages_.front();
  }

  // A compute action that began at t0 ended now: its time goes to the rank's and the stage's.
  void account(const Action& a, double t0) {
    const double dt = now_s() - t0;
    stats_.compute_s += dt;
    Costs& c = stats_.stage_s[static_cast<size_t>(a.stage)];
    (a.op == Op::forward          ? c.forward
     : a.op == Op::backward       ? c.backward
     : a.op == Op::backward_input ? c.backward_input
                                  : c.backward_weight) += dt;
  }

  // One message: the transfer header and the data.
  void send_piece(const Tensor& t, int dst, int tag_header, int tag_data) {
    Tensor header = transfer_header(t);
    Tensor data = contiguous(t);
    sends_.push_back(executor_.comm_->isend(header, dst, tag_header));
    sends_.push_back(executor_.comm_->isend(data, dst, tag_data));
    in_flight_.push_back(header);
    in_flight_.push_back(data);
  }

  void post_data(Inbound& in, int src, int tag_data) {
    const auto [shape, dtype] = parse_transfer_header(in.header->result());
    in.data = executor_.comm_->irecv(shape, dtype, src, tag_data);
  }

  void pump() {
    for (auto& [key, in] : inbound_)
      if (!in.data && in.header->test()) post_data(in, key.first, key.second + 1);
  }

  Tensor recv_piece(int src, int tag_header, int tag_data) {
    if (!executor_.recv_ahead_)
      inbound_[{src, tag_header}].header =
          executor_.comm_->irecv({kTransferHeader}, DType::i64, src, tag_header);
    auto it = inbound_.find({src, tag_header});
    HP_CHECK(it != inbound_.end(), "no receive posted from ", src, " with tag ", tag_header);
    if (!it->second.data) post_data(it->second, src, tag_data);
    const Tensor t = it->second.data->result();
    inbound_.erase(it);
    return t;
  }

  void send(const Tensor& t, int64_t to_rank, int dir, int64_t mb, int64_t stage) {
    for (const Piece& piece : executor_.pieces(to_rank))
      send_piece(piece.count < 0 ? t : narrow(t, 0, piece.begin, piece.count), piece.peer,
                 tag(dir, mb, stage, 0), tag(dir, mb, stage, 1));
  }

  Tensor recv(int64_t from_rank, int dir, int64_t mb, int64_t stage) {
    const double t0 = now_s();
    std::vector<Tensor> parts;
    for (const Piece& piece : executor_.pieces(from_rank))
      parts.push_back(recv_piece(piece.peer, tag(dir, mb, stage, 0), tag(dir, mb, stage, 1)));
    stats_.wait_s += now_s() - t0;
    return parts.size() == 1 ? parts[0] : cat(parts, 0);
  }

  void forward(const Action& a, const Key& key) {
    const double t0 = now_s();
    Tensor input;
    if (a.stage == 0) {
      input = first_input_(a.microbatch);
    } else {
      auto it = inbox_act_.find(key);
      HP_CHECK(it != inbox_act_.end(), "no input for ", to_string(a));
      input = it->second.detach();  // a leaf whose .grad is the gradient to send back
      input.requires_grad_(true);
      inbox_act_.erase(it);
    }
    Tensor out = stage_fn(a.stage).forward(a.microbatch, input);
    // The next stage on this rank takes the output in memory.
    if (a.stage + 1 < stages_ && schedule_.rank_of_stage(a.stage + 1) == rank_)
      inbox_act_[{a.microbatch, a.stage + 1}] = out.detach();
    saved_[key] = {input, out};
    account(a, t0);
  }

  // B, or I: then linear layers queue their weight gradients for W (weight_grad.h).
  void backward(const Action& a, const Key& key) {
    const double t0 = now_s();
    std::optional<WeightGradCapture> capture;
    if (a.op == Op::backward_input) capture.emplace(&weight_grads_[key]);
    auto it = saved_.find(key);
    HP_CHECK(it != saved_.end(), "no forward for ", to_string(a));
    if (a.stage + 1 == stages_) {
      autograd::backward({it->second.output});
    } else {
      auto g = inbox_grad_.find(key);
      HP_CHECK(g != inbox_grad_.end(), "no output gradient for ", to_string(a));
      autograd::backward({it->second.output}, {g->second});
      inbox_grad_.erase(g);
    }
    if (a.stage > 0 && schedule_.rank_of_stage(a.stage - 1) == rank_)
      inbox_grad_[{a.microbatch, a.stage - 1}] = it->second.input.grad();
    // Sends of the input gradient read it from `saved_` (the next action): drop the output.
    it->second.output = Tensor();
    if (a.stage == 0 || schedule_.rank_of_stage(a.stage - 1) == rank_) saved_.erase(it);
    account(a, t0);
  }

  void backward_weight(const Action& a, const Key& key) {
    const double t0 = now_s();
    auto it = weight_grads_.find(key);
    HP_CHECK(it != weight_grads_.end(), "no input gradient before ", to_string(a));
    for (const auto& task : it->second) task();
    weight_grads_.erase(it);
    account(a, t0);
  }

  const Executor& executor_;
  const Schedule& schedule_;
  const std::function<Tensor(int64_t mb)>& first_input_;
  const int64_t rank_, microbatches_, stages_;
  const double start_s_;
  ExecutorStats stats_;
  std::map<Key, Tensor> inbox_act_, inbox_grad_;  // arrived: input of stage / grad of its output
  std::map<Key, Saved> saved_;
  std::map<Key, WeightGradTasks> weight_grads_;  // queued by I, run by W
  std::vector<dist::WorkPtr> sends_;
  std::vector<Tensor> in_flight_;  // tensors being sent, alive until their send completes
  std::map<std::pair<int, int>, Inbound> inbound_;  // by (peer, header tag)
};

ExecutorStats Executor::run(const std::function<Tensor(int64_t mb)>& first_input) {
  Step step(*this, first_input);
  const std::vector<Action>& actions = schedule_.actions[static_cast<size_t>(rank_)];
  if (recv_ahead_) step.post_receives(actions);
  for (const Action& a : actions) step.run_action(a);
  return step.finish();
}

}  // namespace hp::pipeline
