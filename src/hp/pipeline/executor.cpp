// The pipeline executor (executor.h).
#include "hp/pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>

#include "hp/autograd/engine.h"
#include "hp/core/error.h"
#include "hp/core/profiler.h"
#include "hp/ops/ops.h"
#include "hp/pipeline/weight_grad.h"
#include "hp/shard/placement.h"

namespace hp::pipeline {

namespace {

constexpr int64_t kHeader = 8;  // [dtype, ndim, dims ...] as i64

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

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

ExecutorStats Executor::run(const std::function<Tensor(int64_t mb)>& first_input) {
  const Schedule& s = schedule_;
  const int64_t rank = rank_;
  const int64_t m = s.spec.microbatches, n = s.num_stages;
  const double t_start = now_s();
  ExecutorStats st;
  st.stage_s.assign(static_cast<size_t>(n), Costs{0, 0, 0, 0, 0});
  // A compute action that began at t0 ended now: its time goes to the rank's and the stage's.
  auto account = [&](const Action& a, double t0) {
    const double dt = now_s() - t0;
    st.compute_s += dt;
    Costs& c = st.stage_s[static_cast<size_t>(a.stage)];
    (a.op == Op::forward          ? c.forward
     : a.op == Op::backward       ? c.backward
     : a.op == Op::backward_input ? c.backward_input
                                  : c.backward_weight) += dt;
  };
  // dir 0: the activation entering `stage`; dir 1: the gradient of `stage`'s output.
  auto tag = [&](int dir, int64_t mb, int64_t stage, int part) {
    return static_cast<int>(2 * ((dir * m + mb) * n + stage) + part);
  };
  auto stage_fn = [&](int64_t stage) -> const StageFn& {
    for (const StageFn& f : stages_)
      if (f.stage == stage) return f;
    HP_CHECK(false, "stage ", stage, " is not on rank ", rank);
    return stages_.front();
  };
  using Key = std::pair<int64_t, int64_t>;      // (microbatch, stage)
  std::map<Key, Tensor> inbox_act, inbox_grad;  // arrived: input of stage / grad of its output
  struct Saved {
    Tensor input, output;
  };
  std::map<Key, Saved> saved;
  std::map<Key, WeightGradTasks> weight_grads;  // queued by I, run by W
  std::vector<dist::WorkPtr> sends;
  std::vector<Tensor> in_flight;  // tensors being sent, alive until their send completes
  // One message: a header [dtype, ndim, dims ...] and the data.
  auto send_piece = [&](const Tensor& t, int dst, int tag_header, int tag_data) {
    HP_CHECK(t.dim() <= kHeader - 2, "a ", t.dim(), "-d tensor between stages");
    std::vector<int64_t> h(kHeader, 0);
    h[0] = static_cast<int64_t>(t.dtype());
    h[1] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) h[size_t(d) + 2] = t.size(d);
    Tensor header = from_data<int64_t>(h, {kHeader});
    Tensor data = contiguous(t);
    sends.push_back(comm_->isend(header, dst, tag_header));
    sends.push_back(comm_->isend(data, dst, tag_data));
    in_flight.push_back(header);
    in_flight.push_back(data);
  };
  // Receives are posted ahead: every header this rank receives in the step at its start, and a
  // message's data as soon as its header has arrived (pump(), between actions). A message then
  // travels while the rank computes; received only when the action needing it began (header, then
  // data: recv_ahead_ false), each cost about 0.25 ms of bubble on the tiny pipeline bench.
  struct Inbound {
    dist::WorkPtr header, data;
  };
  std::map<std::pair<int, int>, Inbound> inbound;  // by (peer, header tag)
  auto post_data = [&](Inbound& in, int src, int tag_data) {
    const std::vector<double> v = in.header->result().to_vector();
    Shape shape;
    for (int64_t d = 0; d < int64_t(v[1]); ++d) shape.push_back(int64_t(v[size_t(d) + 2]));
    in.data = comm_->irecv(shape, static_cast<DType>(int(v[0])), src, tag_data);
  };
  auto pump = [&] {
    for (auto& [key, in] : inbound)
      if (!in.data && in.header->test()) post_data(in, key.first, key.second + 1);
  };
  auto recv_piece = [&](int src, int tag_header, int tag_data) {
    if (!recv_ahead_)
      inbound[{src, tag_header}].header = comm_->irecv({kHeader}, DType::i64, src, tag_header);
    auto it = inbound.find({src, tag_header});
    HP_CHECK(it != inbound.end(), "no receive posted from ", src, " with tag ", tag_header);
    if (!it->second.data) post_data(it->second, src, tag_data);
    const Tensor t = it->second.data->result();
    inbound.erase(it);
    return t;
  };
  auto send = [&](const Tensor& t, int64_t to_rank, int dir, int64_t mb, int64_t stage) {
    for (const Piece& piece : pieces(to_rank))
      send_piece(piece.count < 0 ? t : narrow(t, 0, piece.begin, piece.count), piece.peer,
                 tag(dir, mb, stage, 0), tag(dir, mb, stage, 1));
  };
  auto recv = [&](int64_t from_rank, int dir, int64_t mb, int64_t stage) {
    const double t0 = now_s();
    std::vector<Tensor> parts;
    for (const Piece& piece : pieces(from_rank))
      parts.push_back(recv_piece(piece.peer, tag(dir, mb, stage, 0), tag(dir, mb, stage, 1)));
    st.wait_s += now_s() - t0;
    return parts.size() == 1 ? parts[0] : cat(parts, 0);
  };
  for (const Action& a : s.actions[static_cast<size_t>(rank)]) {
    if (!recv_ahead_ || (a.op != Op::recv_act && a.op != Op::recv_grad)) continue;
    const int dir = a.op == Op::recv_act ? 0 : 1;
    for (const Piece& piece : pieces(s.rank_of_stage(a.stage + (dir == 0 ? -1 : 1)))) {
      const int th = tag(dir, a.microbatch, a.stage, 0);
      HP_CHECK(th + 1 == tag(dir, a.microbatch, a.stage, 1));
      inbound[{piece.peer, th}].header = comm_->irecv({kHeader}, DType::i64, piece.peer, th);
    }
  }
  for (const Action& a : s.actions[static_cast<size_t>(rank)]) {
    pump();
    const Key key{a.microbatch, a.stage};
    // Profiled runs (hp train --profile) show every action on the rank's timeline ("pipeline
    // F3@s1"), as the forward or backward phase it belongs to.
    const bool fwd = a.op == Op::forward || a.op == Op::send_act || a.op == Op::recv_act;
    const profiler::Scope event(fwd ? profiler::Phase::forward : profiler::Phase::backward,
                                [&] { return "pipeline " + to_string(a); });
    switch (a.op) {
      case Op::recv_act:
        inbox_act[key] = recv(s.rank_of_stage(a.stage - 1), 0, a.microbatch, a.stage);
        break;
      case Op::recv_grad:
        inbox_grad[key] = recv(s.rank_of_stage(a.stage + 1), 1, a.microbatch, a.stage);
        break;
      case Op::send_act:
        send(saved.at(key).output.detach(), s.rank_of_stage(a.stage + 1), 0, a.microbatch,
             a.stage + 1);
        break;
      case Op::send_grad:
        send(saved.at(key).input.grad(), s.rank_of_stage(a.stage - 1), 1, a.microbatch,
             a.stage - 1);
        break;
      case Op::forward: {
        const double t0 = now_s();
        Tensor input;
        if (a.stage == 0) {
          input = first_input(a.microbatch);
        } else {
          auto it = inbox_act.find(key);
          HP_CHECK(it != inbox_act.end(), "no input for ", to_string(a));
          input = it->second.detach();  // a leaf whose .grad is the gradient to send back
          input.requires_grad_(true);
          inbox_act.erase(it);
        }
        Tensor out = stage_fn(a.stage).forward(a.microbatch, input);
        // The next stage on this rank takes the output in memory.
        if (a.stage + 1 < n && s.rank_of_stage(a.stage + 1) == rank)
          inbox_act[{a.microbatch, a.stage + 1}] = out.detach();
        saved[key] = {input, out};
        account(a, t0);
        break;
      }
      case Op::backward:
      case Op::backward_input: {
        const double t0 = now_s();
        // I: linear layers queue their weight gradients for W (weight_grad.h).
        std::optional<WeightGradCapture> capture;
        if (a.op == Op::backward_input) capture.emplace(&weight_grads[key]);
        auto it = saved.find(key);
        HP_CHECK(it != saved.end(), "no forward for ", to_string(a));
        if (a.stage + 1 == n) {
          autograd::backward({it->second.output});
        } else {
          auto g = inbox_grad.find(key);
          HP_CHECK(g != inbox_grad.end(), "no output gradient for ", to_string(a));
          autograd::backward({it->second.output}, {g->second});
          inbox_grad.erase(g);
        }
        if (a.stage > 0 && s.rank_of_stage(a.stage - 1) == rank)
          inbox_grad[{a.microbatch, a.stage - 1}] = it->second.input.grad();
        // Sends of the input gradient read it from `saved` (the next action): drop the output.
        it->second.output = Tensor();
        if (a.stage == 0 || s.rank_of_stage(a.stage - 1) == rank) saved.erase(it);
        account(a, t0);
        break;
      }
      case Op::backward_weight: {
        const double t0 = now_s();
        auto it = weight_grads.find(key);
        HP_CHECK(it != weight_grads.end(), "no input gradient before ", to_string(a));
        for (const auto& task : it->second) task();
        weight_grads.erase(it);
        account(a, t0);
        break;
      }
    }
    // A send was the last use of the stage's saved tensors.
    if (a.op == Op::send_grad) saved.erase(key);
  }
  const double t_wait = now_s();
  for (const auto& w : sends) w->wait();
  st.wait_s += now_s() - t_wait;
  st.total_s = now_s() - t_start;
  return st;
}

}  // namespace hp::pipeline
