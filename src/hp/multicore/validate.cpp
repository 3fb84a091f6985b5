// Plan validation (plan.h): waits reachable and counts consistent, no cycle through events and role
// order (found by simulating the role queues), no unordered buffer access (a data race).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "hp/multicore/plan.h"

namespace hp::multicore {
namespace {

constexpr const char* kC = "multicore";
constexpr int kRoles = 3;

struct Sim {
  std::vector<std::vector<TaskId>> queues = std::vector<std::vector<TaskId>>(kRoles);
  std::vector<size_t> head = std::vector<size_t>(kRoles, 0);
  std::vector<int64_t> counter;
  std::vector<char> done;
  std::vector<TaskId> order;
};

// The first wait of t not yet satisfied, or null.
const Wait* blocking_wait(const Task& t, const std::vector<int64_t>& counter) {
  for (const Wait& w : t.deps.waits)
    if (counter[size_t(w.event)] < w.count) return &w;
  return nullptr;
}

// Runs the role queues in plan order, completing every head whose waits hold, until none moves.
void simulate(const Plan& p, Sim& s) {
  s.counter.assign(size_t(p.num_events()), 0);
  s.done.assign(size_t(p.num_tasks()), 0);
  for (TaskId t = 0; t < p.num_tasks(); ++t) s.queues[int(p.task(t).role)].push_back(t);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < kRoles; ++r) {
      while (s.head[r] < s.queues[r].size()) {
        const TaskId t = s.queues[r][s.head[r]];
        if (blocking_wait(p.task(t), s.counter)) break;
        if (p.task(t).deps.trigger != kNoEvent) ++s.counter[size_t(p.task(t).deps.trigger)];
        s.done[size_t(t)] = 1;
        s.order.push_back(t);
        ++s.head[r];
        moved = true;
      }
    }
  }
}

// Explains a stuck simulation: follows blockers (an unreached event's pending triggerer, or the
// stuck head ahead of a task in its role queue) from one stuck head until a task repeats.
[[noreturn]] void throw_cycle(const Plan& p, const Sim& s) {
  std::vector<int> head_of(size_t(p.num_tasks()), -1);  // role whose stuck head precedes t
  TaskId start = -1;
  for (int r = 0; r < kRoles; ++r)
    for (size_t i = s.head[r]; i < s.queues[r].size(); ++i) {
      head_of[size_t(s.queues[r][i])] = r;
      if (start < 0 && i == s.head[r]) start = s.queues[r][i];
    }
  std::vector<int> seen(size_t(p.num_tasks()), -1);
  std::vector<std::string> steps;
  TaskId t = start;
  while (seen[size_t(t)] < 0) {
    seen[size_t(t)] = int(steps.size());
    const Role role = p.task(t).role;
    const TaskId head = s.queues[int(role)][s.head[int(role)]];
    if (head != t) {
      steps.push_back(detail::cat("task '", p.task(t).name, "' comes after task '",
                                  p.task(head).name, "' in the ", role_name(role), " order"));
      t = head;
      continue;
    }
    const Wait* w = blocking_wait(p.task(t), s.counter);
    TaskId next = -1;
    for (TaskId u = 0; u < p.num_tasks() && next < 0; ++u)
      if (!s.done[size_t(u)] && p.task(u).deps.trigger == w->event) next = u;
    steps.push_back(detail::cat("task '", p.task(t).name, "' waits on event '",
                                p.event_name(w->event), "' (", s.counter[size_t(w->event)], " of ",
                                w->count, ") triggered by task '", p.task(next).name, "'"));
    t = next;
  }
  std::string msg;
  for (size_t i = size_t(seen[size_t(t)]); i < steps.size(); ++i)
    msg += (msg.empty() ? "" : "; ") + steps[i];
  HP_THROW(PlanError, kC, "cycle: ", msg, " (", s.order.size(), " of ", p.num_tasks(),
           " tasks can run)");
}

void check_waits(const Plan& p, const std::vector<int64_t>& triggers) {
  for (TaskId t = 0; t < p.num_tasks(); ++t)
    for (const Wait& w : p.task(t).deps.waits) {
      const std::string& e = p.event_name(w.event);
      const int64_t n = triggers[size_t(w.event)];
      if (w.count < 1)
        HP_THROW(PlanError, kC, "task '", p.task(t).name, "' waits on event '", e, "' with count ",
                 w.count, " (must be >= 1)");
      if (n == 0)
        HP_THROW(PlanError, kC, "task '", p.task(t).name, "' waits on event '", e,
                 "', which no task triggers (unreachable wait)");
      if (w.count > n)
        HP_THROW(PlanError, kC, "task '", p.task(t).name, "' waits for event '", e, "' to reach ",
                 w.count, ", but only ", n, " tasks trigger it (inconsistent fan-in count)");
    }
}

// B surely runs after A when B waits for every trigger of an event A triggers (a partial count
// leaves open which triggers it saw). Two tasks touching one buffer, one of them writing it, must
// be ordered so, directly or through a chain.
void check_races(const Plan& p, const std::vector<int64_t>& triggers,
                 const std::vector<TaskId>& order) {
  const size_t n = size_t(p.num_tasks()), words = (n + 63) / 64;
  std::vector<uint64_t> before(n * words, 0);  // [task, words]: tasks surely done before it
  for (TaskId b : order)
    for (const Wait& w : p.task(b).deps.waits) {
      if (w.count != triggers[size_t(w.event)]) continue;
      for (TaskId a = 0; a < TaskId(n); ++a) {
        if (p.task(a).deps.trigger != w.event) continue;
        for (size_t i = 0; i < words; ++i)
          before[size_t(b) * words + i] |= before[size_t(a) * words + i];
        before[size_t(b) * words + size_t(a) / 64] |= uint64_t(1) << (a % 64);
      }
    }
  auto ordered = [&](TaskId a, TaskId b) {
    return (before[size_t(b) * words + size_t(a) / 64] >> (a % 64) & 1) ||
           (before[size_t(a) * words + size_t(b) / 64] >> (b % 64) & 1);
  };
  // Every use of a buffer or view, grouped by the buffer it belongs to.
  struct Use {
    TaskId task;
    BufferId buffer;
    bool write;
  };
  std::vector<std::vector<Use>> uses(size_t(p.num_buffers()));
  for (TaskId t = 0; t < TaskId(n); ++t) {
    for (BufferId b : p.task(t).writes) uses[size_t(p.root_of(b))].push_back({t, b, true});
    for (BufferId b : p.task(t).reads) uses[size_t(p.root_of(b))].push_back({t, b, false});
  }
  for (const auto& list : uses)
    for (size_t i = 0; i < list.size(); ++i)
      for (size_t j = i + 1; j < list.size(); ++j) {
        const Use &x = list[i], &y = list[j];
        const auto [xb, xe] = p.range_of(x.buffer);
        const auto [yb, ye] = p.range_of(y.buffer);
        if (x.task == y.task || !(x.write || y.write) || xe <= yb || ye <= xb) continue;
        if (ordered(x.task, y.task)) continue;
        const Use& w = x.write ? x : y;
        HP_THROW(PlanError, kC, "tasks '", p.task(x.task).name, "' and '", p.task(y.task).name,
                 "' both use buffer '", p.buffer_name(w.buffer), "' ('", p.task(w.task).name,
                 "' writes it) but no event chain orders them (data race)");
      }
}

}  // namespace

void Plan::validate() const {
  if (validated_) return;
  std::vector<int64_t> triggers(events_.size(), 0);
  for (const Task& t : tasks_)
    if (t.deps.trigger != kNoEvent) ++triggers[size_t(t.deps.trigger)];
  check_waits(*this, triggers);
  Sim s;
  simulate(*this, s);
  if (s.order.size() != tasks_.size()) throw_cycle(*this, s);
  check_races(*this, triggers, s.order);
  schedule_ = std::move(s.order);
  validated_ = true;
}

const std::vector<TaskId>& Plan::schedule() const {
  validate();
  return schedule_;
}

}  // namespace hp::multicore
