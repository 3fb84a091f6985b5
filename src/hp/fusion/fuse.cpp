#include "hp/fusion/fuse.h"

#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/fusion/simplify.h"
#include "hp/fusion/vjp.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/ops/ops.h"

namespace hp::fusion {

namespace {

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}
std::function<void(const std::string&)>& log_sink() {
  static std::function<void(const std::string&)> sink;
  return sink;
}

void log_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(log_mutex());
  if (log_sink())
    log_sink()(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

// Hash of the inputs' shapes and dtypes: the signature a program is compiled for.
uint64_t signature(const std::vector<Tensor>& xs) {
  uint64_t h = 1469598103934665603ull;
  auto put = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  put(xs.size());
  for (const Tensor& t : xs) {
    put(static_cast<uint64_t>(t.dtype()));
    put(static_cast<uint64_t>(t.dim()));
    for (int64_t d : t.shape()) put(static_cast<uint64_t>(d));
  }
  return h;
}

std::string signature_str(const std::vector<Tensor>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i].desc();
  return s;
}

}  // namespace

void set_log_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(log_mutex());
  log_sink() = std::move(sink);
}

void trace(const TraceFn& fn, const std::vector<Tensor>& inputs, Graph* g) {
  g->clear();
  std::vector<Var> vars;
  vars.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) HP_THROW(ValueError, "fusion", "input ", i, " is undefined");
    vars.push_back(trace_input(g, static_cast<int32_t>(i), inputs[i].shape(), inputs[i].dtype()));
  }
  g->num_inputs = static_cast<int32_t>(inputs.size());
  for (const Var& v : fn(vars)) {
    if (v.graph() != g) HP_THROW(ValueError, "fusion", "an output is not a Var of this trace");
    g->outputs.push_back(v.id());
  }
  if (g->outputs.empty()) HP_THROW(ValueError, "fusion", "the traced function returned no outputs");
}

struct Fused::State {
  struct Entry {
    Graph graph;                          // the structure compiled for this signature
    std::shared_ptr<const Program> prog;  // null: runs eagerly
    std::string why;                      // why not fused (logged once)
    bool changed_logged = false;
    uint64_t last_use = 0;  // State::tick at the last lookup (LRU)
  };
  // The backward of one traced structure for one set of inputs needing gradients.
  struct Vjp {
    Graph forward;  // the structure it was built for
    Graph graph;    // the vjp (vjp.h)
    std::vector<int> grad_of;
    std::shared_ptr<const Program> prog;  // null: runs eagerly
  };
  // A vjp with its LRU tick (the Vjp itself is shared with recorded backward nodes, so it stays
  // alive for them after eviction).
  struct VjpSlot {
    std::shared_ptr<const Vjp> vjp;
    uint64_t last_use = 0;
  };
  TraceFn fn;
  std::string name;
  bool patterns = true;  // canonicalize (simplify.h) and match stencils (stencils.h)
  mutable std::mutex mu;
  std::unordered_map<uint64_t, Entry> cache;
  std::unordered_map<uint64_t, VjpSlot> vjps;  // by signature, structure, need
  FusedStats stats;
  uint64_t tick = 0;  // lookups so far (the LRU clock)

  std::shared_ptr<const Vjp> vjp_for(const Graph& g, uint64_t key, const std::vector<uint8_t>& need,
                                     const std::vector<Tensor>& inputs);
};

namespace {

// Drops the least recently used entry of `map` when it is full (a linear scan: ≤ 64 entries, and
// only on a miss).
template <class Map>
void make_room(Map& map, int64_t* evictions) {
  if (map.size() < kFusedCacheEntries) return;
  auto oldest = map.begin();
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  map.erase(oldest);
  ++*evictions;
}

}  // namespace

std::shared_ptr<const Fused::State::Vjp> Fused::State::vjp_for(const Graph& g, uint64_t key,
                                                               const std::vector<uint8_t>& need,
                                                               const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = vjps.find(key);
  if (it != vjps.end() && it->second.vjp->forward.same_structure(g)) {
    it->second.last_use = ++tick;
    return it->second.vjp;
  }
  if (it == vjps.end()) make_room(vjps, &stats.evictions);
  auto v = std::make_shared<Vjp>();
  std::string why;
  // The vjp of the canonical form: a rewritten silu / gelu_tanh differentiates through its own
  // *_bwd functor, as the forward runs it.
  Graph simple;
  const Graph& fwd = patterns && simplify(g, &simple) > 0 ? simple : g;
  if (!build_vjp(fwd, need, &v->graph, &v->grad_of, &why))
    HP_THROW(ValueError, "fusion", name, ": ", why, " (an input requires grad)");
  v->forward = g;
  v->prog = compile(v->graph, &why);
  if (!v->prog)
    log_line("[fusion] " + name + " (backward): " + why + " (inputs " + signature_str(inputs) +
             "); running eagerly");
  vjps[key] = VjpSlot{v, ++tick};
  return v;
}

Fused::Fused(TraceFn fn, std::string name, bool patterns) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
  state_->name = std::move(name);
  state_->patterns = patterns;
}

Fused fuse(TraceFn fn, std::string name, bool patterns) {
  return Fused(std::move(fn), std::move(name), patterns);
}

const std::string& Fused::name() const {
  return state_->name;
}

FusedStats Fused::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  FusedStats st = state_->stats;
  st.entries = static_cast<int64_t>(state_->cache.size());
  return st;
}

namespace {

// The traced graph of this thread's last call (its node buffer is reused: no allocation per call).
Graph& scratch_graph() {
  thread_local Graph g;
  return g;
}

}  // namespace

std::shared_ptr<const Program> Fused::plan(const std::vector<Tensor>& inputs) const {
  State& s = *state_;
  Graph& g = scratch_graph();
  trace(s.fn, inputs, &g);
  // A hit compares the traced nodes with the cached graph's directly: that comparison is needed
  // anyway (a hash can collide), and it is cheaper than hashing the graph (a serial
  // multiply chain, ~1/4 of a hit's time).
  const uint64_t sig = signature(inputs);
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.stats.calls;
  auto it = s.cache.find(sig);
  if (it == s.cache.end()) {
    make_room(s.cache, &s.stats.evictions);
    State::Entry e;
    e.graph = g;
    e.last_use = ++s.tick;
    // Canonical form first (composed activations -> their functors), then stencils, then compile.
    Graph simple;
    const Graph& c = s.patterns && simplify(g, &simple) > 0 ? simple : g;
    const Stencil st = s.patterns ? match_stencil(c) : Stencil{};
    e.prog = st.kind != StencilKind::none ? stencil_program(c, st) : compile(c, &e.why);
    ++s.stats.compiles;
    if (!e.prog) {
      ++s.stats.eager;
      log_line("[fusion] " + s.name + ": " + e.why + " (inputs " + signature_str(inputs) +
               "); running eagerly");
    }
    std::shared_ptr<const Program> prog = e.prog;
    s.cache.emplace(sig, std::move(e));
    return prog;
  }
  it->second.last_use = ++s.tick;
  if (!it->second.graph.same_structure(g)) {
    if (!it->second.changed_logged)
      log_line("[fusion] " + s.name + ": graph structure changed for inputs (" +
               signature_str(inputs) + "); running eagerly");
    it->second.changed_logged = true;
    ++s.stats.eager;
    return nullptr;
  }
  if (it->second.prog)
    ++s.stats.hits;
  else
    ++s.stats.eager;
  return it->second.prog;
}

std::vector<Tensor> Fused::operator()(const std::vector<Tensor>& inputs) const {
  // One op event named by the region while the profiler records (interned only then).
  const profiler::Scope scope(profiler::Category::op, [this] { return state_->name; });
  std::vector<Tensor> xs;
  xs.reserve(inputs.size());
  for (const Tensor& t : inputs) xs.push_back(t.defined() ? t.contiguous().detach() : t);
  std::shared_ptr<const Program> prog = plan(xs);
  // A stencil's hand ops take the arguments themselves and record their own autograd nodes.
  if (prog && prog->stencil.kind != StencilKind::none) return run_stencil(prog->stencil, inputs);
  // A copy of this call's graph: an opaque op may itself call a fused region (and retrace).
  const bool grad = autograd::needs_grad(inputs);
  Graph traced;
  if (!prog || grad) traced = scratch_graph();
  std::vector<Tensor> outs;
  {
    autograd::NoGradGuard no_grad;
    outs = prog ? run_program(*prog, xs) : run_eager(traced, xs);
  }
  if (grad) record_backward(traced, inputs, xs, outs);
  return outs;
}

void Fused::record_backward(const Graph& g, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& xs, const std::vector<Tensor>& outs) const {
  std::vector<uint8_t> need(inputs.size());
  uint64_t key = signature(xs) ^ (g.hash() * 31);
  for (size_t i = 0; i < inputs.size(); ++i) {
    need[i] = inputs[i].defined() && inputs[i].requires_grad();
    key = (key ^ need[i]) * 1099511628211ull;
  }
  std::shared_ptr<const State::Vjp> vjp = state_->vjp_for(g, key, need, xs);
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  for (const Tensor& o : outs) out_shapes.push_back(o.shape()), out_dtypes.push_back(o.dtype());
  // Saved: the inputs only; the backward graph recomputes the forward's values in its tiles. They
  // go through the saved-tensor hooks like any op's (FSDP re-points a saved gathered weight at its
  // re-gathered storage, offload moves activations).
  std::vector<autograd::SavedTensor> saved;
  saved.reserve(xs.size());
  for (const Tensor& x : xs) saved.emplace_back(x);
  autograd::record(
      state_->name.c_str(), inputs, outs,
      [state = state_, vjp, saved, need, out_shapes, out_dtypes](const std::vector<Tensor>& gout) {
        autograd::NoGradGuard no_grad;
        std::vector<Tensor> xs;
        xs.reserve(saved.size());
        for (const autograd::SavedTensor& s : saved) xs.push_back(s.unpack());
        std::vector<Tensor> args = xs;
        for (size_t k = 0; k < gout.size(); ++k)
          args.push_back(!gout[k].defined()                 ? zeros(out_shapes[k], out_dtypes[k])
                         : gout[k].dtype() == out_dtypes[k] ? gout[k].contiguous()
                                                            : gout[k].to(out_dtypes[k]));
        const std::vector<Tensor> r =
            vjp->prog ? run_program(*vjp->prog, args) : run_eager(vjp->graph, args);
        std::vector<Tensor> grads(xs.size());
        for (size_t i = 0; i < xs.size(); ++i) {
          if (!need[i]) continue;
          const int k = vjp->grad_of[i];
          if (k < 0) {
            grads[i] = zeros(xs[i].shape(), xs[i].dtype());
            continue;
          }
          // The summed contributions in their broadcast shape, reduced to the input's.
          Tensor t = r[static_cast<size_t>(k)];
          const Shape full = kernels::broadcast_shapes(t.shape(), xs[i].shape(), "fusion");
          if (t.shape() != full) t = expand(t, full);
          t = sum_to(t, xs[i].shape());
          grads[i] = t.dtype() == xs[i].dtype() ? t : t.to(xs[i].dtype());
        }
        return grads;
      });
}

}  // namespace hp::fusion
