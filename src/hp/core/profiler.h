// The op-level profiler behind `hp train --profile` (docs/PERFORMANCE.md, "Profiling").
//
// Scopes mark what runs on a thread: op front-end calls, backward nodes, module forwards (by FQN),
// collectives and their waits, the trainer's phases. While a recording runs (start() .. stop()),
// every scope that closes becomes one complete event (Chrome's "X" event) in its thread's buffer
// and adds its time to that thread's totals, keyed by (name, category, phase, module).
//
// Time is counted once: a work scope (an op, a backward node, the optimizer or checkpoint phase)
// counts only when no other work scope is open around it on its thread — nested ops fold into the
// outermost one — minus the collectives inside it; a collective counts whole. Everything else
// (steps, phases, modules) is a container whose time is the sum of what ran inside it plus the
// gaps between: its "idle" part.
//
// Off (the normal case) a scope costs one relaxed atomic load and one predictable branch when it
// opens and a branch on a local flag when it closes, and allocates nothing: buffers exist only for
// threads that recorded. Recording is thread-safe (one buffer per thread, locked only against the
// collector) and bounded: past max_events events are dropped and counted, while the totals stay
// complete.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace hp::profiler {

enum class Category : uint8_t { step, phase, module, op, backward, comm };
// What the trainer is doing; events take the phase open around them when they begin.
enum class Phase : uint8_t { none, forward, backward, optimizer, checkpoint };

const char* category_name(Category c);  // "step", "phase", "module", "op", "backward", "comm"
const char* phase_name(Phase p);        // "none", "forward", ...

// ~40 bytes per event in memory and ~150 in the trace file: 500k events ≈ 20 MB / 75 MB.
inline constexpr int64_t kDefaultMaxEvents = 500000;

namespace detail {
extern std::atomic<bool> g_recording;
}  // namespace detail

inline bool recording() {
  return detail::g_recording.load(std::memory_order_relaxed);
}

// Steady-clock nanoseconds: the time base of every event (shared by the processes of one host).
int64_t now_ns();

// A C string equal to `s` that lives as long as the process (names built at run time: module
// FQNs, backward node names, "step 3").
const char* intern(std::string_view s);

// The FQN of the innermost module scope open on this thread while recording (for a backward node:
// the module whose forward recorded it), else null.
const char* current_module();

class Scope {
 public:
  // name: a string that outlives the recording (a literal or intern()); null records nothing.
  // module: the module to attribute the scope to instead of the current one (backward nodes).
  Scope(Category cat, const char* name, const char* module = nullptr) {
    if (recording() && name) open(cat, name, module, Phase::none);
  }
  // name_fn() (a std::string or a C string) is called only while recording, so a name built at
  // run time costs nothing when the profiler is off.
  template <class NameFn>
  requires std::is_invocable_v<NameFn> Scope(Category cat, NameFn&& name_fn,
                                             const char* module = nullptr) {
    if (recording()) open(cat, interned(name_fn()), module, Phase::none);
  }
  // A trainer phase: events that begin inside it count under `p`.
  explicit Scope(Phase p) {
    if (recording()) open(Category::phase, phase_name(p), nullptr, p);
  }
  // The same under its own name (a pipeline action: "pipeline F3@s1" in the forward phase).
  template <class NameFn>
  requires std::is_invocable_v<NameFn> Scope(Phase p, NameFn&& name_fn) {
    if (recording()) open(Category::phase, interned(name_fn()), nullptr, p);
  }
  ~Scope() {
    if (open_) close();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  static const char* interned(const char* s) { return s; }
  static const char* interned(const std::string& s) { return intern(s); }
  void open(Category cat, const char* name, const char* module, Phase phase);
  void close();
  bool open_ = false;
};

// An event the caller timed itself ([t0_ns, t1_ns] of now_ns()), e.g. a collective's issue or a
// whole training step; counted like a scope of that category that closed now. No-op when off.
void record(Category cat, const char* name, int64_t t0_ns, int64_t t1_ns);

struct Event {
  const char* name;
  const char* module;  // the module it is attributed to (null: none)
  int64_t ts_ns, dur_ns;
  Category cat;
  Phase phase;
};

// Time of one (name, category, phase, module) on one thread. counted_ns is its share of the
// once-counted time (see the top of this file): 0 for containers and nested work.
struct Total {
  const char* name;
  const char* module;
  Category cat;
  Phase phase;
  int64_t calls = 0, inclusive_ns = 0;
  int64_t counted_calls = 0, counted_ns = 0;  // the calls that counted, and their time
};

struct ThreadTrace {
  int64_t tid = 0;            // the OS thread id
  bool main = false;          // the thread that called start()
  std::vector<Event> events;  // in the order they closed
  std::vector<Total> totals;
};

struct Trace {
  std::vector<ThreadTrace> threads;  // the main thread first
  int64_t max_events = 0;
  int64_t dropped = 0;  // events past max_events (not in `events`, counted in `totals`)
};

// Starts a recording on this thread's behalf (it becomes the main thread), discarding what an
// earlier one left. One recording at a time.
void start(int64_t max_events = kDefaultMaxEvents);
// Ends the recording and returns what it holds. Scopes still open are not included.
Trace stop();

}  // namespace hp::profiler

// The profiler hook of an op front-end function (hp/ops): one scope named `name` to the end of the
// enclosing block.
#define HP_PROFILE_OP(name) \
  const ::hp::profiler::Scope hp_profile_op_scope_(::hp::profiler::Category::op, name)
