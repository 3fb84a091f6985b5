// The profiler's recording (core/profiler.h): nothing recorded and nothing allocated while off,
// one buffer per thread, the event cap, and time counted once (nested work folded into the
// outermost, collectives taken out of the work around them).
#include "hp/core/profiler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <set>
#include <string>
#include <thread>

// Counts operator new on the thread that asks (t_count_allocations), for the "off allocates
// nothing" test; every other allocation of this binary passes straight to malloc.
namespace {
thread_local bool t_count_allocations = false;
thread_local int64_t t_allocations = 0;
}  // namespace

void* operator new(size_t n) {
  if (t_count_allocations) ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
// The nothrow forms too (std::stable_partition's temporary buffer uses them): every allocation of
// this binary must come from the same malloc its deletes free (AddressSanitizer checks the pair).
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (t_count_allocations) ++t_allocations;
  return std::malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace hp::profiler {
namespace {

void spin_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

int64_t event_count(const Trace& t) {
  int64_t n = 0;
  for (const auto& th : t.threads) n += static_cast<int64_t>(th.events.size());
  return n;
}

const Total* find_total(const ThreadTrace& t, const std::string& name) {
  for (const Total& x : t.totals)
    if (name == x.name) return &x;
  return nullptr;
}

// What every hook does: an op scope, a backward node with a run-time name, a module scope with no
// trace name (modules that were never named), a phase.
void hooks_once(int i) {
  const Scope phase(Phase::forward);
  const Scope module(Category::module, nullptr);
  HP_PROFILE_OP("matmul");
  const Scope node(Category::backward, [&] { return "node " + std::to_string(i); });
}

TEST(Profiler, OffRecordsNothingAndAllocatesNothing) {
  ASSERT_FALSE(recording());
  hooks_once(0);  // thread_local set-up of the test machinery, if any, happens here
  t_allocations = 0;
  t_count_allocations = true;
  for (int i = 0; i < 10000; ++i) hooks_once(i);
  t_count_allocations = false;
  EXPECT_EQ(t_allocations, 0) << "a hook allocated while the profiler was off";
  EXPECT_EQ(current_module(), nullptr);
  const Trace t = stop();
  EXPECT_EQ(event_count(t), 0);
  EXPECT_TRUE(t.threads.empty());
}

TEST(Profiler, EveryThreadRecordsIntoItsOwnBuffer) {
  constexpr int kEvents = 1000;
  auto work = [] {
    for (int i = 0; i < kEvents; ++i) {
      const Scope module(Category::module, "layers.0");
      HP_PROFILE_OP("add");
    }
  };
  start();
  std::thread a(work), b(work);
  work();
  a.join();
  b.join();
  const Trace t = stop();
  ASSERT_EQ(t.threads.size(), 3u);
  EXPECT_TRUE(t.threads[0].main);
  std::set<int64_t> tids;
  for (const ThreadTrace& th : t.threads) {
    tids.insert(th.tid);
    EXPECT_EQ(th.events.size(), 2u * kEvents);
    const Total* add = find_total(th, "add");
    ASSERT_NE(add, nullptr);
    EXPECT_EQ(add->calls, kEvents);
    EXPECT_EQ(add->counted_calls, kEvents);
    EXPECT_STREQ(add->module, "layers.0");
    for (const Event& e : th.events) EXPECT_GE(e.dur_ns, 0);
  }
  EXPECT_EQ(tids.size(), 3u);
  EXPECT_EQ(t.dropped, 0);
}

TEST(Profiler, EventCapKeepsTheFirstEventsAndTheTotalsComplete) {
  start(/*max_events=*/1000);
  auto work = [] {
    for (int i = 0; i < 2500; ++i) HP_PROFILE_OP("mul");
  };
  std::thread a(work);
  work();
  a.join();
  const Trace t = stop();
  EXPECT_EQ(event_count(t), 1000);
  EXPECT_EQ(t.dropped, 4000);
  EXPECT_EQ(t.max_events, 1000);
  int64_t calls = 0;
  for (const ThreadTrace& th : t.threads) calls += find_total(th, "mul")->calls;
  EXPECT_EQ(calls, 5000);
}

TEST(Profiler, TimeIsCountedOnceInTheOutermostWork) {
  using std::chrono::microseconds;
  start();
  {
    const Scope phase(Phase::backward);
    const Scope module(Category::module, "model.layers.1");
    HP_PROFILE_OP("outer");
    spin_for(microseconds(2000));
    {
      HP_PROFILE_OP("inner");  // folded into "outer"
      spin_for(microseconds(2000));
    }
    {
      const Scope comm(Category::comm, "wait all_gather");  // taken out of "outer"
      spin_for(microseconds(3000));
    }
  }
  const Trace t = stop();
  ASSERT_EQ(t.threads.size(), 1u);
  const ThreadTrace& th = t.threads[0];
  const Total* outer = find_total(th, "outer");
  const Total* inner = find_total(th, "inner");
  const Total* comm = find_total(th, "wait all_gather");
  ASSERT_TRUE(outer && inner && comm);
  EXPECT_EQ(inner->counted_calls, 0);
  EXPECT_EQ(inner->counted_ns, 0);
  EXPECT_EQ(comm->counted_ns, comm->inclusive_ns);
  EXPECT_EQ(outer->counted_ns, outer->inclusive_ns - comm->inclusive_ns);
  EXPECT_GE(outer->counted_ns, 4'000'000);
  EXPECT_LT(outer->counted_ns, outer->inclusive_ns);
  for (const Total* x : {outer, inner, comm}) {
    EXPECT_EQ(x->phase, Phase::backward) << x->name;
    EXPECT_STREQ(x->module, "model.layers.1") << x->name;
  }
  // The scopes nest in the events as they did in time.
  for (const Event& e : th.events) {
    const std::string name = e.name;
    if (name == "inner" || name == "wait all_gather") {
      const Event* o = nullptr;
      for (const Event& f : th.events)
        if (std::string(f.name) == "outer") o = &f;
      ASSERT_NE(o, nullptr);
      EXPECT_GE(e.ts_ns, o->ts_ns);
      EXPECT_LE(e.ts_ns + e.dur_ns, o->ts_ns + o->dur_ns);
    }
  }
}

TEST(Profiler, BackwardNodesGoToTheModuleThatRecordedThem) {
  start();
  {
    const Scope module(Category::module, "model.layers.0.mlp");
    EXPECT_STREQ(current_module(), "model.layers.0.mlp");
  }
  EXPECT_EQ(current_module(), nullptr);
  {
    const Scope phase(Phase::backward);
    const Scope node(Category::backward, "matmul", "model.layers.0.mlp");
    HP_PROFILE_OP("matmul");  // an op its backward calls: same layer
    EXPECT_STREQ(current_module(), "model.layers.0.mlp");
  }
  const Trace t = stop();
  for (const Event& e : t.threads.at(0).events) {
    if (e.cat == Category::module || e.cat == Category::phase) continue;
    EXPECT_STREQ(e.module, "model.layers.0.mlp") << e.name;
  }
}

TEST(Profiler, ScopesOfAnotherRecordingAreNotRecorded) {
  start();
  stop();
  {
    HP_PROFILE_OP("before");  // opened while off: never recorded
    start();
  }
  {
    HP_PROFILE_OP("straddles");  // opened in this recording, closed after the next start()
    stop();
    start();
  }
  HP_PROFILE_OP("inside");
  const Trace t = stop();
  ASSERT_EQ(t.threads.size(), 0u) << "only 'inside' is open, and it has not closed yet";
}

TEST(Profiler, RecordedEventsCountLikeScopes) {
  start();
  const int64_t t0 = now_ns();
  {
    HP_PROFILE_OP("op");
    spin_for(std::chrono::microseconds(500));
    record(Category::comm, "all_reduce", now_ns() - 200'000, now_ns());
  }
  record(Category::step, "step 1", t0, now_ns());
  const Trace t = stop();
  const ThreadTrace& th = t.threads.at(0);
  const Total* op = find_total(th, "op");
  const Total* comm = find_total(th, "all_reduce");
  const Total* step = find_total(th, "step 1");
  ASSERT_TRUE(op && comm && step);
  EXPECT_EQ(comm->counted_calls, 1);
  EXPECT_EQ(op->counted_ns, op->inclusive_ns - comm->inclusive_ns);
  EXPECT_EQ(step->counted_calls, 0);
  EXPECT_GE(step->inclusive_ns, op->inclusive_ns);
}

TEST(Profiler, InternedNamesAreStable) {
  const char* a = intern(std::string("model.layers.") + "7");
  const char* b = intern("model.layers.7");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "model.layers.7");
}

}  // namespace
}  // namespace hp::profiler
