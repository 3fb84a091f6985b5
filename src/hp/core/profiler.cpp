// The profiler's recording: per-thread buffers, the once-counted totals and the event cap.
#include "hp/core/profiler.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace hp::profiler {

namespace detail {
std::atomic<bool> g_recording{false};
}  // namespace detail

namespace {

// Bumped by start() and stop(): a scope that opened in another recording records nothing.
std::atomic<uint64_t> g_session{0};
std::atomic<int64_t> g_events{0}, g_dropped{0};
std::atomic<int64_t> g_max_events{kDefaultMaxEvents};

struct TotalKey {
  const char* name;
  const char* module;
  Category cat;
  Phase phase;
  bool operator==(const TotalKey&) const = default;
};
struct TotalKeyHash {
  size_t operator()(const TotalKey& k) const {
    const size_t h = std::hash<const void*>()(k.name) * 31 + std::hash<const void*>()(k.module);
    return h * 31 + (size_t(k.cat) << 8 | size_t(k.phase));
  }
};

// What one thread recorded; outlives the thread (kept by the registry until the next start()).
struct Buffer {
  std::mutex mu;  // the owner thread against the collector
  int64_t tid = 0;
  std::atomic<bool> alive{true};
  std::vector<Event> events;
  std::unordered_map<TotalKey, Total, TotalKeyHash> totals;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<Buffer>> buffers;
  int64_t main_tid = 0;
};
// Leaked: threads may record or exit after static destructors ran.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

struct Frame {
  int64_t t0;
  const char* name;
  const char* module;        // attribution of this scope
  const char* saved_module;  // the thread's module before it opened
  uint64_t session;
  int64_t comm_ns;  // collectives inside an outermost work scope
  Category cat;
  Phase phase;        // the phase in effect for this scope
  Phase saved_phase;  // the thread's phase before it opened
  bool outer_work, outer_comm;
};

struct ThreadState {
  std::shared_ptr<Buffer> buffer;
  std::vector<Frame> stack;
  const char* module = nullptr;
  Phase phase = Phase::none;
  int64_t work_frame = -1;  // index in `stack` of the outermost open work scope
  int comm_depth = 0;
  ~ThreadState() { buffer->alive = false; }
};
thread_local std::unique_ptr<ThreadState> t_state;

int64_t os_tid() {
  return static_cast<int64_t>(::syscall(SYS_gettid));
}

ThreadState& state() {
  if (!t_state) {
    t_state = std::make_unique<ThreadState>();
    t_state->buffer = std::make_shared<Buffer>();
    t_state->buffer->tid = os_tid();
    t_state->buffer->events.reserve(4096);
    t_state->stack.reserve(64);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.buffers.push_back(t_state->buffer);
  }
  return *t_state;
}

bool is_work(Category cat, Phase phase) {
  return cat == Category::op || cat == Category::backward ||
         (cat == Category::phase && (phase == Phase::optimizer || phase == Phase::checkpoint));
}

// counts: the event is outermost work or an outermost collective; counted_ns its once-counted time.
void add(Buffer& b, const Event& e, bool counts, int64_t counted_ns) {
  std::lock_guard<std::mutex> lock(b.mu);
  if (g_events.fetch_add(1, std::memory_order_relaxed) <
      g_max_events.load(std::memory_order_relaxed))
    b.events.push_back(e);
  else
    g_dropped.fetch_add(1, std::memory_order_relaxed);
  Total& t = b.totals[TotalKey{e.name, e.module, e.cat, e.phase}];
  if (t.calls == 0) t = Total{e.name, e.module, e.cat, e.phase};
  ++t.calls;
  t.inclusive_ns += e.dur_ns;
  if (counts) ++t.counted_calls, t.counted_ns += counted_ns;
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::step:
      return "step";
    case Category::phase:
      return "phase";
    case Category::module:
      return "module";
    case Category::op:
      return "op";
    case Category::backward:
      return "backward";
    case Category::comm:
      return "comm";
  }
  return "?";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::none:
      return "none";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::optimizer:
      return "optimizer";
    case Phase::checkpoint:
      return "checkpoint";
  }
  return "?";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* intern(std::string_view s) {
  static std::mutex* mu = new std::mutex();
  static auto* names = new std::unordered_set<std::string>();  // node-based: c_str() stays put
  std::lock_guard<std::mutex> lock(*mu);
  return names->emplace(s).first->c_str();
}

const char* current_module() {
  return recording() && t_state ? t_state->module : nullptr;
}

void Scope::open(Category cat, const char* name, const char* module, Phase phase) {
  ThreadState& s = state();
  Frame f{};
  f.name = name;
  f.cat = cat;
  f.session = g_session.load(std::memory_order_relaxed);
  f.saved_module = s.module;
  f.saved_phase = s.phase;
  if (cat == Category::module)
    s.module = name;
  else if (module)
    s.module = module;
  if (cat == Category::phase) s.phase = phase;
  f.module = s.module;
  f.phase = s.phase;
  f.outer_work = is_work(cat, f.phase) && s.work_frame < 0 && s.comm_depth == 0;
  f.outer_comm = cat == Category::comm && s.comm_depth == 0;
  if (f.outer_work) s.work_frame = static_cast<int64_t>(s.stack.size());
  if (cat == Category::comm) ++s.comm_depth;
  f.t0 = now_ns();  // last, so the bookkeeping above is outside the event
  s.stack.push_back(f);
  open_ = true;
}

void Scope::close() {
  const int64_t t1 = now_ns();
  ThreadState& s = *t_state;
  const Frame f = s.stack.back();
  s.stack.pop_back();
  s.module = f.saved_module;
  s.phase = f.saved_phase;
  if (f.cat == Category::comm) --s.comm_depth;
  if (f.outer_work) s.work_frame = -1;
  if (f.session != g_session.load(std::memory_order_relaxed)) return;  // that recording is over
  const int64_t dur = t1 - f.t0;
  if (f.outer_comm && s.work_frame >= 0) s.stack[size_t(s.work_frame)].comm_ns += dur;
  const int64_t counted = f.outer_work ? dur - f.comm_ns : f.outer_comm ? dur : 0;
  add(*s.buffer, Event{f.name, f.module, f.t0, dur, f.cat, f.phase}, f.outer_work || f.outer_comm,
      counted);
}

void record(Category cat, const char* name, int64_t t0_ns, int64_t t1_ns) {
  if (!recording() || !name) return;
  ThreadState& s = state();
  const int64_t dur = t1_ns - t0_ns;
  // A leaf: work or a collective counts unless a scope of its kind is open around it.
  bool counts = false;
  if (cat == Category::comm && s.comm_depth == 0) {
    counts = true;
    if (s.work_frame >= 0) s.stack[size_t(s.work_frame)].comm_ns += dur;
  } else if (is_work(cat, s.phase) && s.work_frame < 0 && s.comm_depth == 0) {
    counts = true;
  }
  add(*s.buffer, Event{name, s.module, t0_ns, dur, cat, s.phase}, counts, counts ? dur : 0);
}

void start(int64_t max_events) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase_if(r.buffers, [](const std::shared_ptr<Buffer>& b) { return !b->alive; });
  for (auto& b : r.buffers) {
    std::lock_guard<std::mutex> block(b->mu);
    b->events.clear();
    b->totals.clear();
  }
  r.main_tid = os_tid();
  g_events = 0;
  g_dropped = 0;
  g_max_events = max_events;
  g_session.fetch_add(1);
  detail::g_recording.store(true);
}

Trace stop() {
  detail::g_recording.store(false);
  g_session.fetch_add(1);
  Trace out;
  out.max_events = g_max_events.load();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& b : r.buffers) {
    std::lock_guard<std::mutex> block(b->mu);
    if (b->events.empty() && b->totals.empty()) continue;
    ThreadTrace t;
    t.tid = b->tid;
    t.main = b->tid == r.main_tid;
    t.events = std::move(b->events);
    b->events = {};
    for (auto& [key, total] : b->totals) t.totals.push_back(total);
    b->totals.clear();
    out.threads.push_back(std::move(t));
  }
  std::stable_partition(out.threads.begin(), out.threads.end(),
                        [](const ThreadTrace& t) { return t.main; });
  out.dropped = g_dropped.load();
  return out;
}

}  // namespace hp::profiler
