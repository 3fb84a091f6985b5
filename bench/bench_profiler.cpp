// The cost of the profiler's hooks (core/profiler.h), per hook, beside the same loop without one:
//   BM_no_hook          an opaque call: the baseline every row is compared with
//   BM_op_hook/off      + HP_PROFILE_OP with the profiler off (every op front-end call pays this)
//   BM_module_hook/off  + a module scope of an unnamed module (nn::Module::wrapped_forward)
//   BM_node_hook/off    + a backward node scope with a run-time name (autograd engine)
//   BM_op_hook/on       + the same op scope while recording (event + totals; the per-event cost)
//   BM_node_hook/on     + a node scope while recording (interns the node's std::string name)
// Off − no_hook is the overhead of an unprofiled run per hook; multiply by the hooks per step
// (the events of a profiled step: the trace of `hp train --profile`) for the cost per step.
#include <benchmark/benchmark.h>

#include <string>

#include "hp/core/profiler.h"

namespace {

// Stands in for an op's work: a call the compiler cannot see through or remove.
[[gnu::noinline]] void opaque(int64_t* x) {
  benchmark::DoNotOptimize(*x += 1);
}

void BM_no_hook(benchmark::State& state) {
  int64_t x = 0;
  for (auto _ : state) opaque(&x);
}

void BM_op_hook(benchmark::State& state) {
  if (state.range(0)) hp::profiler::start(int64_t(1) << 40);
  int64_t x = 0;
  for (auto _ : state) {
    HP_PROFILE_OP("matmul");
    opaque(&x);
  }
  if (state.range(0)) hp::profiler::stop();
}

void BM_module_hook(benchmark::State& state) {
  const char* unnamed = nullptr;
  benchmark::DoNotOptimize(unnamed);
  int64_t x = 0;
  for (auto _ : state) {
    const hp::profiler::Scope scope(hp::profiler::Category::module, unnamed);
    opaque(&x);
  }
}

void BM_node_hook(benchmark::State& state) {
  if (state.range(0)) hp::profiler::start(int64_t(1) << 40);
  const std::string name = "a_backward_node_name";  // past std::string's inline buffer
  int64_t x = 0;
  for (auto _ : state) {
    const hp::profiler::Scope scope(hp::profiler::Category::backward, [&] { return name; });
    opaque(&x);
  }
  if (state.range(0)) hp::profiler::stop();
}

}  // namespace

BENCHMARK(BM_no_hook);
// Recording keeps every event: a fixed count bounds the memory (~40 MB).
BENCHMARK(BM_op_hook)->ArgName("on")->Arg(0);
BENCHMARK(BM_op_hook)->ArgName("on")->Arg(1)->Iterations(1000000);
BENCHMARK(BM_module_hook);
BENCHMARK(BM_node_hook)->ArgName("on")->Arg(0);
BENCHMARK(BM_node_hook)->ArgName("on")->Arg(1)->Iterations(1000000);
BENCHMARK_MAIN();
