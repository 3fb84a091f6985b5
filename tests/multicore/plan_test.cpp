// Plan validation: cycles (through events and through role order), unreachable waits, fan-in
// counts, data races, GEMM extents, dynamic buffers (allocated at run time by the task writing
// them); each rejection names the task, event or buffer at fault.
#include "hp/multicore/plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "error_of.h"
#include "hp/multicore/runtime.h"

namespace hp::multicore {
namespace {

using hp::testing::error_of;

void noop(const TaskContext&) {}

TEST(MulticorePlan, RejectsCycleThroughEvents) {
  Plan p;
  const BufferId b = p.add_buffer("b", zeros({4}));
  const EventId e1 = p.add_event("e1"), e2 = p.add_event("e2");
  p.add_vector("first", {b}, {}, noop, {{{e2, 1}}, e1});
  p.add_gemm("second", {.a = b, .b = b, .c = p.add_buffer("c", zeros({4})), .M = 2, .N = 2, .K = 2},
             {{{e1, 1}}, e2});
  const std::string msg = error_of([&] { p.validate(); });
  EXPECT_NE(msg.find("[multicore] cycle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("task 'first' waits on event 'e2' (0 of 1) triggered by task 'second'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("task 'second' waits on event 'e1'"), std::string::npos) << msg;
}

TEST(MulticorePlan, RejectsDeadlockThroughRoleOrder) {
  // Both vector tasks are in one queue: 'early' waits for what 'late' (behind it) triggers.
  Plan p;
  const EventId e = p.add_event("late done");
  p.add_vector("early", {}, {}, noop, {{{e, 1}}, kNoEvent});
  p.add_vector("late", {}, {}, noop, {{}, e});
  const std::string msg = error_of([&] { p.validate(); });
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("task 'early' waits on event 'late done'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("task 'late' comes after task 'early' in the vector order"), std::string::npos)
      << msg;
}

TEST(MulticorePlan, RejectsUnreachableWait) {
  Plan p;
  const EventId never = p.add_event("never");
  p.add_event("other");
  p.add_vector("stuck", {}, {}, noop, {{{never, 1}}, kNoEvent});
  EXPECT_EQ(error_of([&] { p.validate(); }),
            "[multicore] task 'stuck' waits on event 'never', which no task triggers "
            "(unreachable wait)");
  Plan q;
  EXPECT_NE(error_of([&] {
              q.add_vector("bad", {}, {}, noop, {{{7, 1}}, kNoEvent});
            }).find("task 'bad' waits on event 7, but the plan has 0 events"),
            std::string::npos);
}

TEST(MulticorePlan, RejectsInconsistentFanIn) {
  Plan p;
  const EventId done = p.add_event("done");
  p.add_vector("a", {}, {}, noop, {{}, done});
  p.add_vector("b", {}, {}, noop, {{}, done});
  p.add_vector("join", {}, {}, noop, {{{done, 3}}, kNoEvent});
  EXPECT_EQ(error_of([&] { p.validate(); }),
            "[multicore] task 'join' waits for event 'done' to reach 3, but only 2 tasks trigger "
            "it (inconsistent fan-in count)");
  Plan q;
  const EventId e = q.add_event("e");
  q.add_vector("t", {}, {}, noop, {{}, e});
  q.add_vector("zero", {}, {}, noop, {{{e, 0}}, kNoEvent});
  EXPECT_EQ(error_of([&] { q.validate(); }),
            "[multicore] task 'zero' waits on event 'e' with count 0 (must be >= 1)");
}

TEST(MulticorePlan, FanInOrdersAllTriggersTransitively) {
  Plan p;
  const BufferId x = p.add_buffer("x", zeros({8})), y = p.add_buffer("y", zeros({8}));
  const BufferId z = p.add_buffer("z", zeros({8}));
  const EventId x_done = p.add_event("x done"), done = p.add_event("done");
  p.add_vector("w x", {}, {x}, noop, {{}, x_done});
  p.add_gemm("w y", {.a = x, .b = x, .c = y, .M = 2, .N = 2, .K = 2}, {{{x_done, 1}}, done});
  p.add_vector("w z", {}, {z}, noop, {{}, done});
  // Waits for both triggers of 'done', so it runs after 'w y', 'w z' and (through 'w y') 'w x'.
  p.add_vector("read all", {x, y, z}, {}, noop, {{{done, 2}}, kNoEvent});
  EXPECT_EQ(error_of([&] { p.validate(); }), "(no error)");
  EXPECT_EQ(p.schedule().size(), 4u);
  EXPECT_EQ(p.schedule().back(), 3);
}

TEST(MulticorePlan, RejectsDataRaces) {
  Plan p;
  const BufferId buf = p.add_buffer("shared", zeros({8}));
  p.add_vector("writer", {}, {buf}, noop, {});
  p.add_gemm("reader",
             {.a = buf, .b = buf, .c = p.add_buffer("c", zeros({4})), .M = 2, .N = 2, .K = 2}, {});
  EXPECT_EQ(error_of([&] { p.validate(); }),
            "[multicore] tasks 'writer' and 'reader' both use buffer 'shared' ('writer' writes "
            "it) but no event chain orders them (data race)");

  // A partial count does not say which trigger it saw: 'read' may run before 'w1'.
  Plan q;
  const BufferId b = q.add_buffer("b", zeros({8}));
  const EventId e = q.add_event("e");
  q.add_vector("w0", {}, {}, noop, {{}, e});
  q.add_gemm("w1",
             {.a = q.add_buffer("a", zeros({4})),
              .b = q.add_buffer("bb", zeros({4})),
              .c = b,
              .M = 2,
              .N = 2,
              .K = 2},
             {{}, e});
  q.add_vector("read", {b}, {}, noop, {{{e, 1}}, kNoEvent});
  EXPECT_NE(error_of([&] { q.validate(); }).find("tasks 'w1' and 'read' both use buffer 'b'"),
            std::string::npos);
}

TEST(MulticorePlan, ViewsConflictOnlyWhereTheyOverlap) {
  Plan p;
  const BufferId all = p.add_buffer("all", zeros({4, 3}));
  const BufferId lo = p.add_view("rows 0-1", all, {2, 3}, 0);
  const BufferId hi = p.add_view("rows 2-3", all, {2, 3}, 6);
  const BufferId mid = p.add_view("rows 1-2", all, {2, 3}, 3);
  p.add_vector("write lo", {}, {lo}, noop, {});
  p.add_vector("write hi", {}, {hi}, noop, {});
  EXPECT_EQ(error_of([&] { p.validate(); }), "(no error)");
  p.add_vector("read mid", {mid}, {}, noop, {});
  EXPECT_EQ(error_of([&] { p.validate(); }),
            "[multicore] tasks 'write lo' and 'read mid' both use buffer 'rows 0-1' ('write lo' "
            "writes it) but no event chain orders them (data race)");
  EXPECT_NE(p.dump().find("buffer 2 'rows 2-3' [2, 3] f32 view of 'all' [6, 12)"),
            std::string::npos)
      << p.dump();
  EXPECT_NE(error_of([&] { p.add_view("too far", hi, {2, 3}, 1); })
                .find("view 'too far' of 6 elements at offset 1 does not fit buffer 'rows 2-3'"),
            std::string::npos);
  // Binding the buffer moves its views; a view itself cannot be bound.
  Tensor fresh = full({4, 3}, 7.0);
  p.bind(all, fresh);
  EXPECT_EQ(p.buffer(hi).raw_data(), static_cast<float*>(fresh.raw_data()) + 6);
  EXPECT_EQ(p.buffer(hi).data<float>()[0], 7.0f);
  EXPECT_NE(error_of([&] { p.bind(hi, zeros({2, 3})); }).find("bind its buffer 'all' instead"),
            std::string::npos);
}

TEST(MulticorePlan, DynamicBuffersAreAllocatedByTheirWriter) {
  Plan p;
  const BufferId d = p.add_dynamic_buffer("rows", DType::f32);
  const BufferId other = p.add_buffer("other", zeros({2}));
  const EventId sized = p.add_event("sized");
  p.add_vector("size", {}, {d},
               [d](const TaskContext& c) {
                 const Tensor& t = c.allocate(d, {3, 2});
                 for (int64_t i = 0; i < 6; ++i) t.data<float>()[i] = float(i);
               },
               {{}, sized});
  p.add_vector("sum", {d}, {other},
               [d, other](const TaskContext& c) {
                 float s = 0;
                 for (int64_t i = 0; i < c.buffer(d).numel(); ++i) s += c.data<float>(d)[i];
                 c.data<float>(other)[0] = s;
               },
               {{{sized, 1}}, kNoEvent});
  EXPECT_EQ(error_of([&] { p.validate(); }), "(no error)");
  EXPECT_NE(p.dump().find("buffer 0 'rows' [0] f32 dynamic"), std::string::npos) << p.dump();
  run_sequential(p);
  EXPECT_EQ(p.buffer(d).shape(), (Shape{3, 2}));
  EXPECT_EQ(p.buffer(other).data<float>()[0], 15.0f);
  // Whatever its size turns out to be, any unordered use races with the allocating task.
  p.add_vector("peek", {d}, {}, noop, {});
  EXPECT_EQ(error_of([&] { p.validate(); }),
            "[multicore] tasks 'size' and 'peek' both use buffer 'rows' ('size' writes it) but no "
            "event chain orders them (data race)");
  EXPECT_NE(error_of([&] { p.add_view("v", d, {1}, 0); })
                .find("view 'v' of dynamic buffer 'rows': its shape is known only at run time"),
            std::string::npos);
  EXPECT_NE(error_of([&] { p.bind(d, zeros({6})); })
                .find("bind of dynamic buffer 'rows': the task that writes it allocates it"),
            std::string::npos);
  // Only a task writing the dynamic buffer allocates it.
  Plan q;
  const BufferId e = q.add_dynamic_buffer("e", DType::f32);
  q.add_vector("reader", {e}, {}, [e](const TaskContext& c) { c.allocate(e, {1}); }, {});
  EXPECT_EQ(error_of([&] { run_sequential(q); }),
            "[multicore] task 'reader' allocates buffer 'e', which is not a dynamic buffer it "
            "writes");
  Plan r;
  const BufferId f = r.add_buffer("f", zeros({1}));
  r.add_vector("static", {}, {f}, [f](const TaskContext& c) { c.allocate(f, {1}); }, {});
  EXPECT_NE(
      error_of([&] { run_sequential(r); }).find("allocates buffer 'f', which is not a dynamic"),
      std::string::npos);
}

TEST(MulticorePlan, RejectsBadGemm) {
  Plan p;
  const BufferId a = p.add_buffer("a", zeros({6})), c = p.add_buffer("c", zeros({4}));
  EXPECT_EQ(
      error_of([&] { p.add_gemm("g", {.a = a, .b = a, .c = c, .M = 2, .N = 2, .K = 4}, {}); }),
      "[multicore] task 'g': A [2, 4] at offset 0 with ld 4 needs 8 elements, buffer 'a' "
      "has 6");
  const BufferId i = p.add_buffer("ints", zeros({8}, DType::i32));
  EXPECT_NE(error_of([&] {
              p.add_gemm("h", {.a = i, .b = a, .c = c, .M = 1, .N = 1, .K = 1}, {});
            }).find("task 'h': GEMM dtypes A i32"),
            std::string::npos);
}

TEST(MulticorePlan, DumpAndParts) {
  Plan p;
  const BufferId a = p.add_buffer("a", zeros({256, 512})), b = p.add_buffer("b", zeros({512, 512}));
  const BufferId c = p.add_buffer("c", zeros({256, 512}));
  const EventId e = p.add_event("mm done");
  p.add_gemm("mm", {.a = a, .b = b, .c = c, .M = 256, .N = 512, .K = 512}, {{}, e});
  p.add_vector("scale", {c}, {c}, 1000, 300, [](const TaskContext&, int64_t, int64_t, int64_t) {},
               {{{e, 1}}, kNoEvent});
  // 256·512·512 = 2^26 multiply-adds: 4 parts of 64 rows; 1000 items in blocks of 300: 4.
  EXPECT_EQ(p.num_parts(0), 4);
  EXPECT_EQ(p.num_parts(1), 4);
  const std::string d = p.dump();
  EXPECT_NE(d.find("task 0 'mm' cube parts 4 gemm 256x512x512 reads [a, b] writes [c] waits [] "
                   "triggers 'mm done'"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("task 1 'scale' vector parts 4 reads [c] writes [c] waits ['mm done'>=1] "
                   "triggers -"),
            std::string::npos)
      << d;
}

}  // namespace
}  // namespace hp::multicore
