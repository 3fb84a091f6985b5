// fusion::fuse: the explicit capture API of the DVM engine (docs/FUSION.md).
//
//   auto swish = hp::fusion::fuse([](const std::vector<Var>& x) {
//     return std::vector<Var>{x[0] * sigmoid(x[0])};
//   });
//   std::vector<hp::Tensor> y = swish({t});
//
// Every call traces the function on Vars bound to the inputs' shapes and dtypes (nanoseconds per
// op), looks the inputs' signature up in the callable's cache, and runs the program compiled for it
// when the traced graph is structurally the one compiled. The first call of a signature compiles
// (the cache is bounded: kFusedCacheEntries, least recently used out);
// a graph the engine does not fuse (an opaque op, an unsupported dtype or broadcast), or a traced
// structure that changed under the same signature, runs eagerly — node by node through the eager
// kernels — with one log line per signature and reason. Results are never those of another graph.
// When an input requires grad (and grad mode is on), the call records one autograd node whose
// backward is the region's vjp (vjp.h), itself compiled and cached; only the inputs are saved.
// A composed activation (x·sigmoid(x), the tanh-GELU polynomial, …) is first rewritten to its functor
// (simplify.h). A graph matching a stencil pattern (stencils.h: RMSNorm·w, residual add + RMSNorm·w)
// runs the pattern's hand kernel and its autograd node instead (per-row statistics saved).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hp/fusion/builder.h"
#include "hp/fusion/program.h"

namespace hp::fusion {

using TraceFn = std::function<std::vector<Var>(const std::vector<Var>&)>;

struct FusedStats {
  int64_t calls = 0;
  int64_t compiles = 0;  // programs built (one per new signature)
  int64_t hits = 0;      // calls that ran a cached program
  int64_t eager = 0;     // calls that ran eagerly (fallback)
  int64_t evictions = 0; // cached programs (forward or backward) dropped to stay within the bound
  int64_t entries = 0;   // forward signatures cached now (≤ kFusedCacheEntries)
};

// Each callable keeps at most this many forward signatures, and as many backward programs; the
// least recently used one is dropped when a new one would exceed it (a run whose shapes vary —
// generation, changing batch shapes — would otherwise grow the cache without bound). A dropped
// signature that returns is compiled again: microseconds.
inline constexpr size_t kFusedCacheEntries = 64;

class Fused {
 public:
  // patterns: composed activations are rewritten to their functors (simplify.h) and graphs
  // matching a stencil pattern (stencils.h) run its hand kernel; false keeps every graph as traced
  // on the generic passes, bitwise the eager ops (tests of the engine itself, the bench's chains).
  Fused(TraceFn fn, std::string name, bool patterns = true);
  // Runs the region on `inputs` (f32 or bf16 tensors, any layout; made contiguous).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  // Trace + cache lookup (compiling on a miss) without running: the program the call would run,
  // or null when it would run eagerly. Benchmarks time this as "compile" / "cache hit".
  std::shared_ptr<const Program> plan(const std::vector<Tensor>& inputs) const;
  FusedStats stats() const;
  const std::string& name() const;

 private:
  void record_backward(const Graph& g, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& xs, const std::vector<Tensor>& outs) const;
  struct State;
  std::shared_ptr<State> state_;
};

// Wraps fn as a fused region named `name` (used in log lines).
Fused fuse(TraceFn fn, std::string name = "fused", bool patterns = true);

// Traces fn on Vars of the inputs' shapes and dtypes into *g (cleared first).
void trace(const TraceFn& fn, const std::vector<Tensor>& inputs, Graph* g);

// The log sink of fallback lines (default: one line on stderr). Tests capture it.
void set_log_sink(std::function<void(const std::string&)> sink);

}  // namespace hp::fusion
