// Pipeline schedules: builders, the validating simulator and the printers (schedule.h).
#include "hp/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

namespace hp::pipeline {

const char* op_name(Op op) {
  switch (op) {
    case Op::forward:
      return "F";
    case Op::backward:
      return "B";
    case Op::backward_input:
      return "I";
    case Op::backward_weight:
      return "W";
    case Op::send_act:
      return "SEND_F";
    case Op::recv_act:
      return "RECV_F";
    case Op::send_grad:
      return "SEND_B";
    case Op::recv_grad:
      return "RECV_B";
  }
  return "?";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input ||
         op == Op::backward_weight;
}

std::string to_string(const Action& a) {
  return detail::cat(op_name(a.op), a.microbatch, "@s", a.stage);
}

namespace {
constexpr std::pair<const char*, ScheduleKind> kKinds[] = {
    {"gpipe", ScheduleKind::gpipe},
    {"1f1b", ScheduleKind::one_f_one_b},
    {"interleaved_1f1b", ScheduleKind::interleaved_1f1b},
    {"zb_h1", ScheduleKind::zb_h1},
    {"zb_h2", ScheduleKind::zb_h2}};
}  // namespace

ScheduleKind schedule_kind_from_name(const std::string& name, const std::string& key) {
  for (const auto& [n, k] : kKinds)
    if (name == n) return k;
  HP_THROW(ValueError, "pipeline", key, " = '", name,
           "' is not a schedule: use gpipe, 1f1b, interleaved_1f1b, zb_h1 or zb_h2");
}

const char* schedule_kind_name(ScheduleKind k) {
  for (const auto& [n, kind] : kKinds)
    if (kind == k) return n;
  return "?";
}

bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::zb_h1 || k == ScheduleKind::zb_h2;
}

std::vector<int64_t> Schedule::stages_of_rank(int64_t r) const {
  std::vector<int64_t> out;
  for (int64_t s = r; s < num_stages; s += spec.ranks) out.push_back(s);
  return out;
}

namespace {

// Compute order of one rank (no transfers yet).
using Order = std::vector<Action>;

Order gpipe_order(int64_t m, int64_t stage) {
  Order o;
  for (int64_t i = 0; i < m; ++i) o.push_back({Op::forward, i, stage});
  for (int64_t i = 0; i < m; ++i) o.push_back({Op::backward, i, stage});
  return o;
}

// 1F1B on one stage per rank; with `split`, ZB-H1: each B becomes I, and W's follow once the
// rank has r I's outstanding (torch.distributed.pipelining's _get_1f1b_rank_ops).
Order one_f_one_b_order(int64_t p, int64_t m, int64_t r, bool split) {
  Order o;
  const int64_t warmup = std::min(p - 1 - r, m);
  int64_t f = 0, b = 0, w = 0;
  auto backward = [&] {
    o.push_back({split ? Op::backward_input : Op::backward, b++, r});
    if (split && b > r) o.push_back({Op::backward_weight, w++, r});
  };
  while (f < warmup) o.push_back({Op::forward, f++, r});
  while (f < m) {
    o.push_back({Op::forward, f++, r});
    backward();
  }
  while (b < m) backward();
  while (split && w < m) o.push_back({Op::backward_weight, w++, r});
  return o;
}

// ZB-H2 on rank r (schedule.h): group k is F_k, I_{k−d}, W_{k−lag}, each when its microbatch is
// in 0..m−1. With m ≥ 2p−1 that is the paper's steady state (F_x, I_{x−2(p−1−r)}, W_{x−2(p−1)})
// with its warm-up and cool-down; with fewer microbatches the lags shrink to m − 1, so no rank
// holds back a W while it has nothing else to run (the unit-cost bubble stays ZB-H1's).
Order zb_h2_order(int64_t p, int64_t m, int64_t r) {
  const int64_t lag = std::min(2 * (p - 1), m - 1);
  const int64_t d = std::min(2 * (p - 1 - r), lag);
  Order o;
  for (int64_t k = 0; k < m + lag; ++k) {
    if (k < m) o.push_back({Op::forward, k, r});
    if (k >= d && k - d < m) o.push_back({Op::backward_input, k - d, r});
    if (k >= lag) o.push_back({Op::backward_weight, k - lag, r});
  }
  return o;
}

// Megatron's interleaved order on rank r: the k-th forward runs chunk (k / p) % v of microbatch
// (k / (p·v))·p + k % p; backwards walk the chunks in reverse. Stage of chunk c = c·p + r.
Order interleaved_order(int64_t p, int64_t m, int64_t v, int64_t r) {
  const int64_t total = m * v;
  auto mb = [&](int64_t k) { return (k / (p * v)) * p + k % p; };
  auto fwd = [&](int64_t k) { return Action{Op::forward, mb(k), ((k / p) % v) * p + r}; };
  auto bwd = [&](int64_t k) { return Action{Op::backward, mb(k), (v - 1 - (k / p) % v) * p + r}; };
  const int64_t warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  Order o;
  int64_t f = 0, b = 0;
  while (f < warmup) o.push_back(fwd(f++));
  while (f < total) {
    o.push_back(fwd(f++));
    o.push_back(bwd(b++));
  }
  while (b < total) o.push_back(bwd(b++));
  return o;
}

void check_spec(const ScheduleSpec& s) {
  const char* name = schedule_kind_name(s.kind);
  if (s.ranks < 1) HP_THROW(ValueError, "pipeline", "parallel.pp must be >= 1, got ", s.ranks);
  if (s.microbatches < 1)
    HP_THROW(ValueError, "pipeline", "parallel.pipeline.microbatches must be >= 1, got ",
             s.microbatches);
  if (s.virtual_stages < 1)
    HP_THROW(ValueError, "pipeline", "parallel.pipeline.virtual_stages must be >= 1, got ",
             s.virtual_stages);
  const bool interleaved = s.kind == ScheduleKind::interleaved_1f1b;
  if (!interleaved && s.virtual_stages != 1)
    HP_THROW(ValueError, "pipeline", "parallel.pipeline.virtual_stages = ", s.virtual_stages,
             " needs parallel.pipeline.schedule interleaved_1f1b, not ", name);
  if (interleaved && s.virtual_stages < 2)
    HP_THROW(ValueError, "pipeline",
             "parallel.pipeline.schedule interleaved_1f1b needs parallel.pipeline.virtual_stages "
             ">= 2, got ",
             s.virtual_stages);
  if (s.kind != ScheduleKind::gpipe && s.microbatches < s.ranks)
    HP_THROW(ValueError, "pipeline", "parallel.pipeline.schedule ", name,
             " needs parallel.pipeline.microbatches >= parallel.pp (", s.ranks, "), got ",
             s.microbatches);
  if (interleaved && s.microbatches % s.ranks != 0)
    HP_THROW(ValueError, "pipeline", "parallel.pipeline.schedule interleaved_1f1b needs ",
             "parallel.pipeline.microbatches (", s.microbatches, ") to be a multiple of ",
             "parallel.pp (", s.ranks, ")");
}

}  // namespace

Schedule build_schedule(const ScheduleSpec& spec) {
  check_spec(spec);
  Schedule s;
  s.spec = spec;
  s.num_stages = spec.ranks * spec.virtual_stages;
  const int64_t p = spec.ranks, m = spec.microbatches;
  s.actions.resize(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) {
    Order order;
    switch (spec.kind) {
      case ScheduleKind::gpipe:
        order = gpipe_order(m, r);
        break;
      case ScheduleKind::one_f_one_b:
        order = one_f_one_b_order(p, m, r, false);
        break;
      case ScheduleKind::zb_h1:
        order = one_f_one_b_order(p, m, r, true);
        break;
      case ScheduleKind::zb_h2:
        order = zb_h2_order(p, m, r);
        break;
      case ScheduleKind::interleaved_1f1b:
        order = interleaved_order(p, m, spec.virtual_stages, r);
        break;
    }
    // Transfers: a receive right before the action that consumes it, a send right after the one
    // that produces it; none between stages on the same rank.
    std::vector<Action>& out = s.actions[static_cast<size_t>(r)];
    for (const Action& a : order) {
      const bool fwd = a.op == Op::forward;
      const bool bwd = a.op == Op::backward || a.op == Op::backward_input;
      if (fwd && a.stage > 0 && s.rank_of_stage(a.stage - 1) != r)
        out.push_back({Op::recv_act, a.microbatch, a.stage});
      if (bwd && a.stage + 1 < s.num_stages && s.rank_of_stage(a.stage + 1) != r)
        out.push_back({Op::recv_grad, a.microbatch, a.stage});
      out.push_back(a);
      if (fwd && a.stage + 1 < s.num_stages && s.rank_of_stage(a.stage + 1) != r)
        out.push_back({Op::send_act, a.microbatch, a.stage});
      if (bwd && a.stage > 0 && s.rank_of_stage(a.stage - 1) != r)
        out.push_back({Op::send_grad, a.microbatch, a.stage});
    }
  }
  return s;
}

double Timeline::bubble_fraction() const {
  if (busy.empty() || makespan <= 0) return 0;
  double total = 0;
  for (double b : busy) total += b;
  return 1.0 - total / (double(busy.size()) * makespan);
}

namespace {

// What the simulator records: (op, microbatch, stage) → the time it completed.
using Key = std::tuple<Op, int64_t, int64_t>;

// What an action needs before it can run: (time it is ready, or null) and its name. `local` needs
// come from the rank itself: missing now means missing forever (list order).
struct Need {
  const double* ready;
  std::string name;
  bool local;
};

void action_error(int64_t r, size_t i, const Action& a, const std::string& what) {
  HP_THROW(ScheduleError, "pipeline", "rank ", r, " action ", i, " (", to_string(a), "): ", what);
}

// One simulate() run, its phases in the order simulate() calls them: the static checks of the
// action lists, the event loop (every rank runs its list in order until an action waits on another
// rank), and the reports of a deadlock or of a send no rank receives.
class Simulation {
 public:
  Simulation(const Schedule& s, const std::vector<Costs>& stage_costs)
      : schedule_(s),
        stage_costs_(stage_costs),
        ranks_(s.spec.ranks),
        microbatches_(s.spec.microbatches),
        stages_(s.num_stages) {}

  // Stage held by the rank, microbatch in range, each action at most once, transfers only to a
  // neighbour stage on another rank.
  void check_actions() {
    const Schedule& s = schedule_;
    const int64_t m = microbatches_, n = stages_;
    for (int64_t r = 0; r < ranks_; ++r) {
      const auto& list = s.actions[static_cast<size_t>(r)];
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.stage < 0 || a.stage >= n)
          action_error(r, i, a, detail::cat("no stage ", a.stage, " of ", n));
        if (a.microbatch < 0 || a.microbatch >= m)
          action_error(r, i, a, detail::cat("no microbatch ", a.microbatch, " of ", m));
        if (s.rank_of_stage(a.stage) != r)
          action_error(r, i, a,
                       detail::cat("stage ", a.stage, " lives on rank ", s.rank_of_stage(a.stage)));
        if (!by_rank_.emplace(Key{a.op, a.microbatch, a.stage}, r).second)
          action_error(r, i, a, "appears twice");
        const bool first = a.stage == 0, last = a.stage == n - 1;
        const bool prev_remote = !first && s.rank_of_stage(a.stage - 1) != r;
        const bool next_remote = !last && s.rank_of_stage(a.stage + 1) != r;
        if ((a.op == Op::send_act && !next_remote) || (a.op == Op::recv_grad && !next_remote) ||
            (a.op == Op::recv_act && !prev_remote) || (a.op == Op::send_grad && !prev_remote))
          action_error(r, i, a, "no transfer between this stage and a neighbour on another rank");
      }
    }
  }

  // Every microbatch: F, and B or (I and W), on every stage; a split backward has both halves.
  void check_every_microbatch() const {
    for (int64_t st = 0; st < stages_; ++st)
      for (int64_t mb = 0; mb < microbatches_; ++mb) {
        const std::string what = detail::cat("microbatch ", mb, " of stage ", st, " (rank ",
                                             schedule_.rank_of_stage(st), ")");
        if (!has(Op::forward, mb, st)) HP_THROW(ScheduleError, "pipeline", what, " has no F");
        const bool b = has(Op::backward, mb, st), i = has(Op::backward_input, mb, st),
                   w = has(Op::backward_weight, mb, st);
        if (b && (i || w))
          HP_THROW(ScheduleError, "pipeline", what, " has both B and a split backward (I / W)");
        if (!b && !(i && w))
          HP_THROW(ScheduleError, "pipeline", what,
                   !b && !i && !w ? " has no backward (B, or I and W)"
                                  : (i ? " has I but no W" : " has W but no I"));
      }
  }

  // Sweeps the ranks, each running its list until an action waits on another rank's, until a
  // sweep runs nothing: then every list is done, or the ranks left deadlock.
  void run() {
    const auto p = static_cast<size_t>(ranks_);
    timeline_.busy.assign(p, 0.0);
    timeline_.spans.resize(p);
    pc_.assign(p, 0);
    clock_.assign(p, 0.0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int64_t r = 0; r < ranks_; ++r) progress |= advance(r);
    }
  }

  void check_no_deadlock() const {
    std::string stuck;
    for (int64_t r = 0; r < ranks_; ++r) {
      const auto& list = schedule_.actions[static_cast<size_t>(r)];
      const size_t i = pc_[static_cast<size_t>(r)];
      if (i < list.size()) {
        std::string waits;
        for (const Need& need : needs(r, list[i]))
          if (!need.ready) waits = need.name;
        stuck += detail::cat(stuck.empty() ? "" : "; ", "rank ", r, " at action ", i, " (",
                             to_string(list[i]), ") waits for ", waits);
      }
    }
    if (!stuck.empty()) HP_THROW(ScheduleError, "pipeline", "deadlock: ", stuck);
  }

  // Every send was received (a receive without its send deadlocks: check_no_deadlock).
  void check_every_send_received() const {
    const Schedule& s = schedule_;
    for (const auto& [key, r] : by_rank_) {
      const auto [op, mb, st] = key;
      if (op == Op::send_act && !has(Op::recv_act, mb, st + 1))
        HP_THROW(ScheduleError, "pipeline", "rank ", r, ": ", to_string({op, mb, st}),
                 " has no matching ", to_string({Op::recv_act, mb, st + 1}), " on rank ",
                 s.rank_of_stage(st + 1));
      if (op == Op::send_grad && !has(Op::recv_grad, mb, st - 1))
        HP_THROW(ScheduleError, "pipeline", "rank ", r, ": ", to_string({op, mb, st}),
                 " has no matching ", to_string({Op::recv_grad, mb, st - 1}), " on rank ",
                 s.rank_of_stage(st - 1));
    }
  }

  Timeline timeline() {
    for (double c : clock_) timeline_.makespan = std::max(timeline_.makespan, c);
    return std::move(timeline_);
  }

 private:
  bool has(Op op, int64_t mb, int64_t st) const { return by_rank_.count(Key{op, mb, st}) > 0; }

  const double* when(Op op, int64_t mb, int64_t st) const {
    auto it = done_.find(Key{op, mb, st});
    return it == done_.end() ? nullptr : &it->second;
  }

  // Runs rank r's actions from its pc on until one waits on another rank; true when any ran.
  bool advance(int64_t r) {
    const auto& list = schedule_.actions[static_cast<size_t>(r)];
    size_t& i = pc_[static_cast<size_t>(r)];
    double& c = clock_[static_cast<size_t>(r)];
    bool progress = false;
    for (; i < list.size(); ++i) {
      const Action& a = list[i];
      double start = c;
      bool blocked = false;
      for (const Need& need : needs(r, a)) {
        if (need.ready) {
          start = std::max(start, *need.ready);
        } else if (need.local) {
          action_error(r, i, a,
                       "needs " + need.name + ", which rank " + std::to_string(r) +
                           " does not run before it");
        } else {
          blocked = true;
        }
      }
      if (blocked) break;
      const double end = start + cost(a.op, a.stage);
      if (is_compute(a.op)) timeline_.busy[static_cast<size_t>(r)] += end - start;
      timeline_.spans[static_cast<size_t>(r)].emplace_back(start, end);
      done_[Key{a.op, a.microbatch, a.stage}] = end;
      c = end;
      progress = true;
    }
    return progress;
  }

  // What action a of rank r needs before it can run.
  std::vector<Need> needs(int64_t r, const Action& a) const {
    const Schedule& s = schedule_;
    std::vector<Need> out;
    const int64_t mb = a.microbatch, st = a.stage;
    auto input_of = [&](int64_t stage) {  // the stage's input activation
      if (s.rank_of_stage(stage - 1) != r)
        out.push_back({when(Op::recv_act, mb, stage), to_string({Op::recv_act, mb, stage}), true});
      else
        out.push_back(
            {when(Op::forward, mb, stage - 1), to_string({Op::forward, mb, stage - 1}), true});
    };
    auto output_grad_of = [&](int64_t stage) {  // the gradient of the stage's output
      if (s.rank_of_stage(stage + 1) != r) {
        out.push_back(
            {when(Op::recv_grad, mb, stage), to_string({Op::recv_grad, mb, stage}), true});
      } else {
        const Op b = has(Op::backward, mb, stage + 1) ? Op::backward : Op::backward_input;
        out.push_back({when(b, mb, stage + 1), to_string({b, mb, stage + 1}), true});
      }
    };
    auto input_grad_of = [&](int64_t stage) {  // B or I of the stage
      const Op b = has(Op::backward, mb, stage) ? Op::backward : Op::backward_input;
      out.push_back({when(b, mb, stage), to_string({b, mb, stage}), true});
    };
    switch (a.op) {
      case Op::forward:
        if (st > 0) input_of(st);
        break;
      case Op::backward:
      case Op::backward_input:
        out.push_back({when(Op::forward, mb, st), to_string({Op::forward, mb, st}), true});
        if (st + 1 < stages_) output_grad_of(st);
        break;
      case Op::backward_weight:
        out.push_back(
            {when(Op::backward_input, mb, st), to_string({Op::backward_input, mb, st}), true});
        break;
      case Op::send_act:
        out.push_back({when(Op::forward, mb, st), to_string({Op::forward, mb, st}), true});
        break;
      case Op::send_grad:
        input_grad_of(st);
        break;
      case Op::recv_act:
        out.push_back({when(Op::send_act, mb, st - 1),
                       detail::cat(to_string({Op::send_act, mb, st - 1}), " on rank ",
                                   s.rank_of_stage(st - 1)),
                       false});
        break;
      case Op::recv_grad:
        out.push_back({when(Op::send_grad, mb, st + 1),
                       detail::cat(to_string({Op::send_grad, mb, st + 1}), " on rank ",
                                   s.rank_of_stage(st + 1)),
                       false});
        break;
    }
    return out;
  }

  double cost(Op op, int64_t stage) const {
    const Costs& costs = stage_costs_[static_cast<size_t>(stage)];
    switch (op) {
      case Op::forward:
        return costs.forward;
      case Op::backward:
        return costs.backward;
      case Op::backward_input:
        return costs.backward_input;
      case Op::backward_weight:
        return costs.backward_weight;
      case Op::recv_act:
      case Op::recv_grad:
        return costs.transfer;
      default:
        return 0.0;
    }
  }

  const Schedule& schedule_;
  const std::vector<Costs>& stage_costs_;
  const int64_t ranks_, microbatches_, stages_;
  std::map<Key, double> done_;      // completed actions (sends: when sent)
  std::map<Key, int64_t> by_rank_;  // every action → the rank that runs it
  Timeline timeline_;
  std::vector<size_t> pc_;     // [ranks] each rank's next action
  std::vector<double> clock_;  // [ranks] when each rank's last action ended
};

}  // namespace

Timeline simulate(const Schedule& s, const Costs& costs) {
  return simulate(s, std::vector<Costs>(static_cast<size_t>(s.num_stages), costs));
}

Timeline simulate(const Schedule& s, const std::vector<Costs>& stage_costs) {
  const int64_t p = s.spec.ranks, n = s.num_stages;
  HP_CHECK(static_cast<int64_t>(s.actions.size()) == p, "schedule has ", s.actions.size(),
           " rank lists for ", p, " ranks");
  HP_CHECK(static_cast<int64_t>(stage_costs.size()) == n, stage_costs.size(), " stage costs for ",
           n, " stages");
  Simulation sim(s, stage_costs);
  sim.check_actions();
  sim.check_every_microbatch();
  sim.run();
  sim.check_no_deadlock();
  sim.check_every_send_received();
  return sim.timeline();
}

double theoretical_bubble(const ScheduleSpec& spec) {
  return simulate(build_schedule(spec)).bubble_fraction();
}

std::string format_actions(const Schedule& s) {
  std::ostringstream o;
  for (size_t r = 0; r < s.actions.size(); ++r) {
    o << "rank " << r << ":";
    for (const Action& a : s.actions[r]) o << ' ' << to_string(a);
    o << '\n';
  }
  return o.str();
}

std::string draw(const Schedule& s) {
  const Timeline t = simulate(s);
  const auto width = static_cast<size_t>(t.makespan + 0.5);
  std::vector<std::vector<std::string>> grid(s.actions.size(),
                                             std::vector<std::string>(width, "."));
  size_t cell = 1;
  for (size_t r = 0; r < s.actions.size(); ++r)
    for (size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      if (!is_compute(a.op)) continue;
      std::string name = std::string(a.op == Op::backward_input    ? "i"
                                     : a.op == Op::backward_weight ? "w"
                                                                   : op_name(a.op)) +
                         std::to_string(a.microbatch);
      if (s.spec.virtual_stages > 1) name.append(1, 's').append(std::to_string(a.stage));
      const auto [b, e] = t.spans[r][i];
      for (auto c = static_cast<size_t>(b + 0.5); c < static_cast<size_t>(e + 0.5); ++c)
        grid[r][c] = name;
      cell = std::max(cell, name.size());
    }
  std::ostringstream o;
  o << schedule_kind_name(s.spec.kind) << ", " << s.spec.ranks << " ranks, " << s.spec.microbatches
    << " microbatches";
  if (s.spec.virtual_stages > 1) o << ", " << s.spec.virtual_stages << " virtual stages";
  o << ": bubble " << t.bubble_fraction() << " (F = I = W = 1, B = 2)\n";
  for (size_t r = 0; r < grid.size(); ++r) {
    o << "rank " << r << " |";
    for (const std::string& c : grid[r]) o << ' ' << c << std::string(cell - c.size(), ' ');
    o << '\n';
  }
  return o.str();
}

}  // namespace hp::pipeline
