// Runtime: a run equals the sequential run bitwise for several worker counts; the watchdog names
// the task and event; task errors propagate; the Chrome trace is valid JSON with one lane per
// worker; the link model holds comm completions.
#include "hp/multicore/runtime.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "error_of.h"
#include "hp/core/thread_pool.h"
#include "hp/io/json.h"
#include "hp/multicore/trace.h"

namespace hp::multicore {
namespace {

using hp::testing::error_of;

// Deterministic values in [-1, 1) from an integer hash.
Tensor values(const Shape& shape, uint32_t seed) {
  Tensor t = empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint32_t h = uint32_t(i) * 2654435761u ^ (seed * 40503u + 17u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = float(h % 20000u) / 10000.0f - 1.0f;
  }
  return t;
}

// Per chunk c: vector "prep c" x_c = tanh(in_c) → cube "mm c" y_c = x_c · w → vector "act c"
// z_c = y_c · sigmoid(y_c) → comm "sum c" all_reduce(z_c) over the world (one rank here) into r_c;
// then vector "reduce" (fan-in over every chunk) out [chunks·rows] = row sums of r_c in order.
struct Pipeline {
  Plan plan;
  BufferId out = kNoBuffer;
  std::vector<BufferId> ys;
};

Pipeline make_pipeline(int64_t chunks, int64_t rows, int64_t K, int64_t N) {
  Pipeline p;
  Plan& plan = p.plan;
  const BufferId w = plan.add_buffer("w", values({K, N}, 1));
  p.out = plan.add_buffer("out", empty({chunks * rows}));
  const EventId reduced = plan.add_event("chunk reduced");
  std::vector<BufferId> rs;
  auto comm = dist::world();
  for (int64_t c = 0; c < chunks; ++c) {
    const std::string s = std::to_string(c);
    const BufferId in = plan.add_buffer("in " + s, values({rows, K}, uint32_t(100 + c)));
    const BufferId x = plan.add_buffer("x " + s, empty({rows, K}));
    const BufferId y = plan.add_buffer("y " + s, empty({rows, N}));
    const BufferId z = plan.add_buffer("z " + s, empty({rows, N}));
    const BufferId r = plan.add_buffer("r " + s, empty({rows, N}));
    p.ys.push_back(y);
    rs.push_back(r);
    const EventId prepped = plan.add_event("prepped " + s), mm = plan.add_event("mm " + s);
    const EventId act = plan.add_event("act " + s);
    plan.add_vector("prep " + s, {in}, {x}, rows * K, 4096,
                    [in, x](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                      for (int64_t i = b; i < e; ++i)
                        ctx.data<float>(x)[i] = std::tanh(ctx.data<float>(in)[i]);
                    },
                    {{}, prepped});
    plan.add_gemm("mm " + s, {.a = x, .b = w, .c = y, .M = rows, .N = N, .K = K},
                  {{{prepped, 1}}, mm});
    plan.add_vector("act " + s, {y}, {z}, rows * N, 3000,
                    [y, z](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                      const float* v = ctx.data<float>(y);
                      for (int64_t i = b; i < e; ++i)
                        ctx.data<float>(z)[i] = v[i] / (1.0f + std::exp(-v[i]));
                    },
                    {{{mm, 1}}, act});
    auto post = [comm, z](const TaskContext& ctx) {
      return comm->iall_reduce(ctx.buffer(z), dist::ReduceOp::sum);
    };
    plan.add_comm("sum " + s, {z}, {}, {.post = post, .result_into = r, .bytes = rows * N * 4},
                  {{{act, 1}}, reduced});
  }
  const BufferId out = p.out;
  plan.add_vector("reduce", rs, {out}, chunks * rows, rows,
                  [rs, out, rows, N](const TaskContext& ctx, int64_t c, int64_t b, int64_t e) {
                    const float* r = ctx.data<float>(rs[size_t(c)]);
                    for (int64_t i = b; i < e; ++i) {
                      float acc = 0;
                      for (int64_t j = 0; j < N; ++j) acc += r[(i - b) * N + j];
                      ctx.data<float>(out)[i] = acc;
                    }
                  },
                  {{{reduced, chunks}}, kNoEvent});
  return p;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

RuntimeOptions options(int cube, int vector) {
  RuntimeOptions o;
  o.cube_threads = cube;
  o.vector_threads = vector;
  o.watchdog_s = 60;
  return o;
}

TEST(MulticoreRuntime, MatchesSequentialBitwiseForAnyWorkerCount) {
  Pipeline ref = make_pipeline(6, 512, 256, 256);
  run_sequential(ref.plan);
  EXPECT_GT(ref.plan.num_parts(1), 1);  // "mm 0" is cut into row blocks
  const float* o = ref.plan.buffer(ref.out).data<float>();
  EXPECT_TRUE(std::isfinite(o[0]) && o[0] != 0.0f);
  for (auto [cube, vector] : {std::pair{1, 1}, {2, 1}, {1, 2}, {3, 2}}) {
    Pipeline p = make_pipeline(6, 512, 256, 256);
    Runtime rt(options(cube, vector));
    for (int rep = 0; rep < 2; ++rep) {  // a plan runs again with its events reset
      rt.run(p.plan);
      EXPECT_TRUE(bitwise_equal(p.plan.buffer(p.out), ref.plan.buffer(ref.out)))
          << "cube " << cube << " vector " << vector << " rep " << rep;
      for (size_t c = 0; c < p.ys.size(); ++c)
        EXPECT_TRUE(bitwise_equal(p.plan.buffer(p.ys[c]), ref.plan.buffer(ref.ys[c])));
    }
  }
}

// The MoE shape of things: a count known only at run time picks how many rows an all_to_all_v
// moves (into a capacity buffer, prefix) and how many a dynamic GEMM multiplies; a cube block task
// scales the result.
TEST(MulticoreRuntime, DynamicGemmAndCommFinish) {
  constexpr int64_t kCap = 96, K = 64, N = 48;
  auto comm = dist::world();
  for (int64_t rows : {int64_t(0), int64_t(37), kCap}) {
    auto build = [&](Plan& plan) {
      const BufferId x = plan.add_buffer("x", values({kCap, K}, 5)),
                     w = plan.add_buffer("w", values({K, N}, 6));
      const BufferId count = plan.add_buffer("count", zeros({1}, DType::i64));
      const BufferId got = plan.add_buffer("received rows", zeros({1}, DType::i64));
      const BufferId recv = plan.add_buffer("recv", zeros({kCap, K}));
      const BufferId y = plan.add_buffer("y", zeros({kCap, N}));
      const EventId counted = plan.add_event("counted"), moved = plan.add_event("moved");
      const EventId mm = plan.add_event("mm");
      plan.add_vector("count", {}, {count},
                      [=](const TaskContext& c) { c.data<int64_t>(count)[0] = rows; },
                      {{}, counted});
      auto post = [=](const TaskContext& c) {
        const int64_t n = c.data<int64_t>(count)[0];
        const Tensor& all = c.buffer(x);
        return comm->iall_to_all_v(all.as_strided({n, K}, {K, 1}, all.offset()), {n}, {n});
      };
      auto finish = [=](const TaskContext& c, const Tensor& r) {
        c.data<int64_t>(got)[0] = r.size(0);
      };
      plan.add_comm("exchange", {x, count}, {got},
                    {.post = post, .result_into = recv, .finish = finish}, {{{counted, 1}}, moved});
      plan.add_gemm("expert", {recv, w, got}, {y},
                    [=](const TaskContext& c) {
                      return Gemm{
                          .a = recv, .b = w, .c = y, .M = c.data<int64_t>(got)[0], .N = N, .K = K};
                    },
                    {{{moved, 1}}, mm});
      plan.add_cube("scale", {got}, {y}, kCap, 32,
                    [=](const TaskContext& c, int64_t, int64_t b, int64_t e) {
                      for (int64_t i = b; i < std::min(e, c.data<int64_t>(got)[0]); ++i)
                        for (int64_t j = 0; j < N; ++j) c.data<float>(y)[i * N + j] *= 0.5f;
                    },
                    {{{mm, 1}}, kNoEvent});
      return y;
    };
    Plan seq, par;
    const BufferId y = build(seq);
    build(par);
    run_sequential(seq);
    Runtime(options(2, 1)).run(par);
    EXPECT_TRUE(bitwise_equal(seq.buffer(y), par.buffer(y))) << rows;
    if (rows > 0) {
      const float* x = seq.buffer(0).data<float>();
      const float* w = seq.buffer(1).data<float>();
      double want = 0;
      for (int64_t k = 0; k < K; ++k) want += double(x[(rows - 1) * K + k]) * w[k * N + 3];
      EXPECT_NEAR(par.buffer(y).data<float>()[(rows - 1) * N + 3], 0.5 * want, 1e-4) << rows;
    }
    if (rows < kCap) {
      EXPECT_EQ(par.buffer(y).data<float>()[kCap * N - 1], 0.0f);  // rows past the count untouched
    }
  }
}

// Receive buffers sized once the counts arrived: "counts" exchanges a row count, "layout"
// allocates the dynamic receive and output buffers from it, the row exchange's link-model bytes
// come from bytes_fn, and a GEMM over the received rows; the runtime equals run_sequential.
TEST(MulticoreRuntime, DynamicBuffersSizedFromExchangedCounts) {
  constexpr int64_t K = 16, N = 8;
  auto comm = dist::world();
  for (int64_t rows : {int64_t(0), int64_t(5), int64_t(70)}) {
    auto build = [&](Plan& plan) {
      const BufferId x = plan.add_buffer("x", values({std::max<int64_t>(rows, 1), K}, 5)),
                     w = plan.add_buffer("w", values({K, N}, 6));
      const BufferId count = plan.add_buffer("count", full({1}, double(rows), DType::i64));
      const BufferId got = plan.add_buffer("got", zeros({1}, DType::i64));
      const BufferId recv = plan.add_dynamic_buffer("recv", DType::f32);
      const BufferId y = plan.add_dynamic_buffer("y", DType::f32);
      const EventId counted = plan.add_event("counted"), sized = plan.add_event("sized"),
                    moved = plan.add_event("moved");
      plan.add_comm("counts", {count}, {},
                    {.post = [=](const TaskContext& c) {
                       return comm->iall_to_all_v(c.buffer(count), {1}, {1});
                     },
                     .result_into = got},
                    {{}, counted});
      plan.add_vector("layout", {got}, {recv, y},
                      [=](const TaskContext& c) {
                        const int64_t n = c.data<int64_t>(got)[0];
                        c.allocate(recv, {std::max<int64_t>(n, 1), K});
                        c.allocate(y, {std::max<int64_t>(n, 1), N});
                      },
                      {{{counted, 1}}, sized});
      auto post = [=](const TaskContext& c) {
        const int64_t n = c.data<int64_t>(got)[0];
        const Tensor& all = c.buffer(x);
        return comm->iall_to_all_v(all.as_strided({n, K}, {K, 1}, all.offset()), {n}, {n});
      };
      auto bytes = [=](const TaskContext& c) { return c.data<int64_t>(got)[0] * K * 4; };
      plan.add_comm("exchange", {x, got}, {},
                    {.post = post, .result_into = recv, .bytes_fn = bytes},
                    {{{sized, 1}}, moved});
      plan.add_gemm("expert", {recv, w, got}, {y},
                    [=](const TaskContext& c) {
                      return Gemm{
                          .a = recv, .b = w, .c = y, .M = c.data<int64_t>(got)[0], .N = N, .K = K};
                    },
                    {{{moved, 1}}, kNoEvent});
      return y;
    };
    Plan seq, par;
    const BufferId y = build(seq);
    build(par);
    run_sequential(seq);
    Runtime(options(2, 1)).run(par);
    EXPECT_EQ(par.buffer(y).shape(), (Shape{std::max<int64_t>(rows, 1), N})) << rows;
    if (rows > 0) {  // (allocate leaves the tensor uninitialized: no row was written at 0)
      EXPECT_TRUE(bitwise_equal(seq.buffer(y), par.buffer(y))) << rows;
    }
    EXPECT_EQ(par.task(2).comm.bytes, rows * K * 4) << rows;
    if (rows > 0) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k)
        want += double(seq.buffer(0).data<float>()[(rows - 1) * K + k]) *
                seq.buffer(1).data<float>()[k * N + 3];
      EXPECT_NEAR(par.buffer(y).data<float>()[(rows - 1) * N + 3], want, 1e-4) << rows;
    }
  }
}

TEST(MulticoreRuntime, Bf16GemmPartsMatchSequential) {
  constexpr int64_t M = 448, N = 200, K = 400;  // 35.8M multiply-adds: 2 parts
  auto build = [&](Plan& plan) {
    const BufferId a = plan.add_buffer("a", values({M, K}, 8).to(DType::bf16));
    const BufferId b = plan.add_buffer("b", values({N, K}, 9).to(DType::bf16));
    const BufferId c = plan.add_buffer("c", zeros({M, N}, DType::bf16));
    plan.add_gemm("mm", {.a = a, .b = b, .c = c, .M = M, .N = N, .K = K, .trans_b = true}, {});
    return c;
  };
  Plan seq, par;
  const BufferId c = build(seq);
  build(par);
  EXPECT_EQ(par.num_parts(0), 2);
  run_sequential(seq);
  Runtime(options(2, 1)).run(par);
  EXPECT_TRUE(bitwise_equal(seq.buffer(c), par.buffer(c)));
  const Tensor a = seq.buffer(0).to(DType::f32), b = seq.buffer(1).to(DType::f32);
  double want = 0;  // C[M-1, N-1]
  for (int64_t k = 0; k < K; ++k)
    want += double(a.data<float>()[(M - 1) * K + k]) * b.data<float>()[(N - 1) * K + k];
  EXPECT_NEAR(par.buffer(c).to(DType::f32).data<float>()[M * N - 1], want,
              0.02 + 0.01 * std::abs(want));
}

TEST(MulticoreRuntime, RestoresThePoolSize) {
  const int before = num_threads();
  set_num_threads(2);
  Pipeline p = make_pipeline(2, 32, 16, 16);
  Runtime(options(1, 1)).run(p.plan);
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(before);
}

TEST(MulticoreRuntime, WatchdogNamesTaskAndEvent) {
  Plan p;
  const EventId slow = p.add_event("slow done");
  p.add_vector(
      "slow", {}, {},
      [](const TaskContext&) { std::this_thread::sleep_for(std::chrono::milliseconds(400)); },
      {{}, slow});
  p.add_gemm("waiter",
             {.a = p.add_buffer("a", zeros({4})),
              .b = p.add_buffer("b", zeros({4})),
              .c = p.add_buffer("c", zeros({4})),
              .M = 2,
              .N = 2,
              .K = 2},
             {{{slow, 1}}, kNoEvent});
  RuntimeOptions o = options(1, 1);
  o.watchdog_s = 0.05;
  o.rank = 3;
  try {
    Runtime(o).run(p);
    FAIL() << "no watchdog";
  } catch (const WatchdogError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[multicore] rank 3: worker 0 (cube) waited ", 0), 0u) << msg;
    EXPECT_NE(msg.find("for task 'waiter' on event 'slow done' (count 0 of 1)"), std::string::npos)
        << msg;
  }
}

// A call that never completes (a peer that never posts its side) is named with its event.
TEST(MulticoreRuntime, WatchdogNamesCommInFlight) {
  struct NeverDone : dist::Work {
    void wait() override {}
    bool test() override { return false; }
  };
  Plan p;
  const EventId e = p.add_event("exchanged");
  p.add_comm(
      "exchange", {}, {},
      {.post = [](const TaskContext&) { return dist::WorkPtr(std::make_shared<NeverDone>()); }},
      {{}, e});
  RuntimeOptions o = options(1, 1);
  o.watchdog_s = 0.05;
  const std::string msg = error_of([&] { Runtime(o).run(p); });
  EXPECT_EQ(msg.rfind("[multicore] rank 0: comm task 'exchange' in flight for ", 0), 0u) << msg;
  EXPECT_NE(msg.find("it triggers event 'exchanged'"), std::string::npos) << msg;
}

TEST(MulticoreRuntime, TaskErrorStopsTheRun) {
  Pipeline p = make_pipeline(3, 32, 16, 16);
  const EventId e = p.plan.add_event("never waited");
  p.plan.add_vector("boom", {}, {},
                    [](const TaskContext&) { HP_THROW(ValueError, "test", "boom"); }, {{}, e});
  EXPECT_EQ(error_of([&] { Runtime(options(2, 2)).run(p.plan); }), "[test] boom");
}

TEST(MulticoreRuntime, ChromeTraceHasOneLanePerWorker) {
  Pipeline p = make_pipeline(3, 128, 256, 256);
  const RunTrace t = Runtime(options(2, 1)).run(p.plan);
  int64_t parts = 0;
  for (TaskId i = 0; i < p.plan.num_tasks(); ++i)
    parts += p.plan.task(i).role == Role::comm ? 1 : p.plan.num_parts(i);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hp_multicore_trace_" + std::to_string(getpid()) + ".json"))
                               .string();
  write_chrome_trace(path, p.plan, t, *dist::world());
  for (const std::string& text : {chrome_trace(p.plan, t, 0), io::read_text_file(path, "test")}) {
    const io::Json doc = io::parse_json(text, "trace");
    std::set<std::string> lanes;
    std::set<int64_t> tids;
    int64_t spans = 0;
    for (const io::Json& ev : doc.at("traceEvents").elements()) {
      if (ev.get_string("ph") == "M" && ev.get_string("name") == "thread_name")
        lanes.insert(ev.at("args").get_string("name"));
      if (ev.get_string("ph") == "X") {
        ++spans;
        tids.insert(ev.get_int("tid"));
        EXPECT_EQ(ev.get_int("pid"), 0);
        EXPECT_GE(ev.get_double("dur"), 0.0);
      }
    }
    EXPECT_EQ(lanes, (std::set<std::string>{"cube 0", "cube 1", "vector 0", "comm"}));
    EXPECT_EQ(spans, parts);
    EXPECT_TRUE(std::all_of(tids.begin(), tids.end(), [](int64_t x) { return x >= 0 && x < 4; }));
  }
  std::filesystem::remove(path);
}

TEST(MulticoreRuntime, LinkModelHoldsCommCompletion) {
  LinkModel m{.gbps = 2.0, .latency_us = 10.0};
  EXPECT_EQ(m.delay_ns(1000000), 510000);
  Pipeline p = make_pipeline(1, 16, 16, 16);
  RuntimeOptions o = options(1, 1);
  o.link.latency_us = 30000;
  EXPECT_GE(Runtime(o).run(p.plan).seconds(), 0.03);
  EXPECT_GE(run_sequential(p.plan, o.link).seconds(), 0.03);

  setenv("HP_LINK_GBPS", "fast", 1);
  EXPECT_EQ(error_of([] { LinkModel::from_env(); }),
            "[multicore] HP_LINK_GBPS='fast' is not a number >= 0");
  setenv("HP_LINK_GBPS", "12.5", 1);
  setenv("HP_LINK_US", "3", 1);
  EXPECT_EQ(LinkModel::from_env().gbps, 12.5);
  EXPECT_EQ(RuntimeOptions::from_env().link.latency_us, 3.0);
  unsetenv("HP_LINK_GBPS");
  unsetenv("HP_LINK_US");
}

}  // namespace
}  // namespace hp::multicore
