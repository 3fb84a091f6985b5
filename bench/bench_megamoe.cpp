// MegaMoE (moe/megamoe.h) vs the sequential expert-parallel MoE layer, forward + backward of the
// routed experts (sort, exchange, SwiGLU experts, exchange back, weighted combine) at the
// release's MoE-module shape scaled down in tokens and experts (hidden 2048, expert intermediate
// 1536, top-8 by default).
//
// Rows, per link:
//   - "host": no link model (shared memory). The baseline is the sequential EP layer
//     (moe::routed_experts with blocking all_to_all_v) and, as a second peer, the MegaMoE plan
//     run task by task (multicore::run_sequential: the same work, each call waited for).
//   - "model f%": the link model (multicore/link.h) set so that all-to-all is f of the
//     sequential step (f = 17%, the release cluster's share, and 30%, 50%). The blocking
//     all_to_all_v cannot be slowed by the model, so the baseline is the task-by-task run of the
//     same plans with the model applied to every call.
// Columns: the comm share of the baseline step, baseline and MegaMoE ms (fwd + bwd), the speedup,
// the most overlap alone can give ("bound" = 1 / (1 − comm share): every transfer hidden, compute
// unchanged; at the release's 17% that is 1.20×, so a larger speedup needs faster compute too),
// the exposed-communication fraction (plan wall time with no compute task running / step time)
// before and after, the expert GEMM rate of the MegaMoE run and its ceiling (gemm_f32 on one
// expert's rows, 1 thread, all ranks at once), and whether outputs and gradients are bitwise
// equal to the baseline's. Figures are the slowest rank's, best of HP_MC_REPS (default 3); one
// invocation, so the ratios share the machine's load.
//
// Thread budget: MegaMoE runs T cube workers (T = the pool's threads) plus 1 vector worker per
// rank, the baselines T pool threads. Every baseline is therefore also measured with T + 1 pool
// threads (rows marked "T+1 thr"), the same number of compute threads as MegaMoE; the speedup that
// counts is the one against those rows. (The comm worker mostly waits, as the baselines' blocking
// calls do, and is not counted on either side.)
//
// Run: build/hp launch -n 4 -- build/bench_megamoe [tokens hidden inter experts top_k groups]
// (HP_LINK_* are ignored: the rows set the link.) HP_MC_MX=f32|bf16 runs MXFP8 (E4M3) experts on
// both sides (mx_grouped_experts in the sequential layer, MegaMoEOptions::mx) with the rows and
// the weights in that dtype; unset: the f32 experts, with HP_MC_DTYPE=f32|bf16 (default f32) the
// rows' and weights' dtype: bf16 is training.mixed_precision bf16 as MoEBlock runs it (the weights
// cast to f32 on both sides, the sequential layer casting the rows around its f32 experts, MegaMoE
// exchanging bf16 rows). HP_MC_TRACE=PREFIX also writes one overlapped
// host step's Chrome traces, PREFIX.fwd.rank<r>.json and PREFIX.bwd.rank<r>.json (the forward shows
// the "counts" and "layout g" tasks of the count exchange).
//   per rank: tokens 32, hidden 2048, inter 1536, experts 16 (4 per rank at 4 ranks), top-8,
//   groups 2. HP_NUM_THREADS=1 (1 GEMM thread per rank, as the runtime's cube worker).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/fusion/patterns.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/models/moe.h"
#include "hp/multicore/link.h"
#include "hp/mx/linear.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"
#include "hp/moe/megamoe.h"

namespace {

using namespace hp;

double slowest(dist::Communicator& c, double v) {
  return c.all_reduce(from_data<double>({v}, {1}), dist::ReduceOp::max).data<double>()[0];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Layer {
  Tensor x, w, ids, wsum;
  int64_t experts = 0;
  moe::LocalExpertWeights local;
};

struct Result {
  double step_s = 0, exposed_s = 0, comm_s = 0, compute_s = 0;
  int64_t bytes = 0;
  std::vector<Tensor> out;  // y, dx, expert grads
};

std::optional<multicore::LinkModel> g_link = multicore::LinkModel{};  // no model unless set
bool g_trace = false;               // keep the MegaMoE runs' Chrome traces (HP_MC_TRACE)
std::optional<mx::QuantSpec> g_mx;  // MX experts (HP_MC_MX)

// The f32 experts' weights as MoEBlock passes them: through cast(·, f32), a no-op for f32 ones,
// whose backward rounds the weight gradients to the parameters' dtype.
moe::LocalExpertWeights f32_weights(const moe::LocalExpertWeights& lw) {
  moe::LocalExpertWeights w;
  for (const auto& [from, to] :
       {std::pair{&lw.gate, &w.gate}, {&lw.up, &w.up}, {&lw.down, &w.down}})
    for (const Tensor& t : *from) to->push_back(cast(t, DType::f32));
  return w;
}

// The sequential layer's MX experts: MoEBlock::run_local_experts' grouped-kernel calls.
Tensor mx_local_experts(const Tensor& xs, const std::vector<int64_t>& counts,
                        const moe::LocalExpertWeights& lw) {
  std::vector<int32_t> ends;
  int64_t end = 0;
  for (int64_t c : counts) ends.push_back(int32_t(end += c));
  const Tensor group_ends = from_data<int32_t>(ends, {int64_t(ends.size())});
  const mx::MxGroupedKernel kernel{*g_mx};
  const Tensor g = kernel(xs, group_ends, stack(lw.gate, 0)),
               u = kernel(xs, group_ends, stack(lw.up, 0));  // [R, inter]
  return kernel(fusion::swiglu(g, u), group_ends, stack(lw.down, 0));
}

// kind: 0 the sequential EP layer, 1 MegaMoE task by task, 2 MegaMoE overlapped.
Result step(const Layer& l, const dist::CommPtr& ep, int kind, int64_t groups) {
  moe::LocalExpertWeights lw;
  for (const auto& [from, to] :
       {std::pair{&l.local.gate, &lw.gate}, {&l.local.up, &lw.up}, {&l.local.down, &lw.down}})
    for (const Tensor& t : *from) to->push_back(t.detach().requires_grad_(true));
  moe::LocalExperts local = [&](const Tensor& xs, const std::vector<int64_t>& counts) {
    const int64_t rows = xs.size(0);
    if (rows == 0) return xs;
    if (g_mx) return mx_local_experts(xs, counts, lw);
    // MoEBlock::run_local_experts: bf16 rows cast to f32 and the outputs back.
    std::vector<int64_t> id;
    for (size_t q = 0; q < counts.size(); ++q) id.insert(id.end(), size_t(counts[q]), int64_t(q));
    const moe::LocalExpertWeights w = f32_weights(lw);
    return cast(models::grouped_experts(cast(xs, DType::f32), ones({rows, 1}),
                                        from_data<int64_t>(id, {rows, 1}), w.gate, w.up, w.down),
                xs.dtype());
  };
  moe::ExpertExchange exchange;
  if (kind > 0)
    exchange = [&](const Tensor& xs, const std::vector<int64_t>& count) {
      return moe::megamoe_experts(
          xs, count, l.experts, g_mx ? lw : f32_weights(lw), ep,
          {.groups = groups, .overlap = kind == 2, .link = g_link, .mx = g_mx, .trace = g_trace});
    };
  Tensor x = l.x.detach().requires_grad_(true);
  ep->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor y = moe::routed_experts(x, l.w, l.ids, l.experts, local, ep, exchange);
  sum(mul(y, l.wsum)).backward();
  Result r;
  r.step_s = seconds_since(t0);
  if (kind > 0) {
    const auto f = moe::megamoe_last_forward(), b = moe::megamoe_last_backward();
    r.exposed_s = f.wall_s - f.compute_s + b.wall_s - b.compute_s;
    r.comm_s = f.comm_s + b.comm_s;
    r.compute_s = f.compute_s + b.compute_s;
    r.bytes = f.bytes + b.bytes;
  }
  r.out = {y.detach(), x.grad()};
  for (const auto* v : {&lw.gate, &lw.up, &lw.down})
    for (const Tensor& t : *v) r.out.push_back(t.grad());
  return r;
}

bool same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor ca = contiguous(a[i]), cb = contiguous(b[i]);
    if (ca.shape() != cb.shape() || std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) != 0)
      return false;
  }
  return true;
}

// The command line [tokens hidden inter experts top_k groups] and the HP_MC_* variables.
struct Options {
  int64_t tokens = 32, H = 2048, I = 1536, E = 16, k = 8, groups = 2;
  int reps = 3;           // HP_MC_REPS
  DType dt = DType::f32;  // of the rows and the expert weights
};

// Fills *o (over its defaults) and g_mx; false when HP_MC_MX / HP_MC_DTYPE are bad (rank 0 says
// why).
bool parse_options(int argc, char** argv, bool root, Options* o) {
  auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  o->tokens = arg(1, o->tokens), o->H = arg(2, o->H), o->I = arg(3, o->I), o->E = arg(4, o->E),
  o->k = arg(5, o->k), o->groups = arg(6, o->groups);
  const char* reps_env = std::getenv("HP_MC_REPS");
  if (reps_env && *reps_env) o->reps = std::atoi(reps_env);
  const char* mx_env = std::getenv("HP_MC_MX");
  const char* dt_env = std::getenv("HP_MC_DTYPE");
  for (const auto& [var, v] : {std::pair{"HP_MC_MX", mx_env}, {"HP_MC_DTYPE", dt_env}}) {
    if (!v || !*v) continue;
    if (std::strcmp(v, "f32") != 0 && std::strcmp(v, "bf16") != 0) {
      if (root) std::fprintf(stderr, "bench_megamoe: %s must be f32 or bf16, got '%s'\n", var, v);
      return false;
    }
    o->dt = std::strcmp(v, "bf16") == 0 ? DType::bf16 : DType::f32;
  }
  if (mx_env && *mx_env) {
    if (dt_env && *dt_env && std::strcmp(mx_env, dt_env) != 0) {
      if (root)
        std::fprintf(stderr, "bench_megamoe: HP_MC_MX=%s and HP_MC_DTYPE=%s disagree\n", mx_env,
                     dt_env);
      return false;
    }
    g_mx = mx::QuantSpec{};
  }
  return true;
}

// The layer: every rank draws all experts' weights (gate, up [I, H], down [H, I]) and keeps its
// own, so all hold one model; then its own rows x, wsum [tokens, H], routing weights w and k
// distinct experts per token, uniformly ([tokens, k]).
Layer make_layer(const Options& o, int rank, int n) {
  const int64_t tokens = o.tokens, H = o.H, I = o.I, E = o.E, k = o.k;
  const DType dt = o.dt;
  Layer l;
  l.experts = E;
  const moe::ExpertRange own = moe::local_experts(E, n, rank);
  manual_seed(1);
  for (int64_t e = 0; e < E; ++e) {
    Tensor g = randn({I, H}, DType::f32, 0.0, 0.02), u = randn({I, H}, DType::f32, 0.0, 0.02),
           d = randn({H, I}, DType::f32, 0.0, 0.02);
    if (e >= own.first && e < own.first + own.count) {
      l.local.gate.push_back(g.to(dt));
      l.local.up.push_back(u.to(dt));
      l.local.down.push_back(d.to(dt));
    }
  }
  manual_seed(100 + uint64_t(rank));
  l.x = randn({tokens, H}).to(dt);
  l.wsum = randn({tokens, H}).to(dt);
  l.w = softmax(randn({tokens, k}), -1);
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> key = randn({E}).to_vector();
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return key[size_t(a)] > key[size_t(b)]; });
    ids.insert(ids.end(), order.begin(), order.begin() + k);
  }
  l.ids = from_data<int64_t>(ids, {tokens, k});
  return l;
}

// Ceiling (GFLOP/s): gemm_f32 on one expert's `rows` × [H → I], 1 thread, all ranks at once.
double gemm_ceiling(dist::Communicator& ep, const Options& o, int64_t rows) {
  const int64_t H = o.H, I = o.I;
  Tensor a = randn({rows, H}), b = randn({I, H}), c = empty({rows, I});
  double best = 1e30;
  for (int r = 0; r < o.reps + 1; ++r) {
    ep.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    kernels::gemm_f32(false, true, rows, I, H, 1.0f, a.data<float>(), H, b.data<float>(), H, 0.0f,
                      c.data<float>(), I);
    if (r > 0) best = std::min(best, seconds_since(t0));
  }
  return 2.0 * double(rows * I * H) / slowest(ep, best) / 1e9;
}

// The runs and the table's rows (printed on rank 0).
class Bench {
 public:
  Bench(dist::CommPtr ep, const Options& o, const Layer& l)
      : ep_(std::move(ep)),
        options_(o),
        layer_(l),
        root_(ep_->rank() == 0),
        threads_(num_threads()),
        // Expert GEMM flops of one fwd + bwd per rank (mean): 3 forward and 6 backward GEMMs.
        flops_(2.0 * 9.0 * double(o.tokens * o.k) * double(o.H) * double(o.I)) {}

  // Host shared memory: the sequential EP layer, the task-by-task plan, MegaMoE. Returns the
  // task-by-task run (the link-model rows' reference); *equal: whether the sequential layer's
  // outputs and gradients are bitwise the task-by-task plan's.
  Result host_rows(bool* equal) const {
    const Result seq = best_of(0), plan_seq = best_of(1), mega = best_of(2);
    const Result seq_fair = best_of_fair(0), plan_seq_fair = best_of_fair(1);
    // The sequential layer's exposed communication is not traced: the task-by-task run's stands
    // in.
    Result seq_shown = seq;
    seq_shown.exposed_s = plan_seq.exposed_s;
    row("host (no model)", "sequential", seq_shown, mega, plan_seq.comm_s / plan_seq.step_s);
    row("host (no model)", "task-by-task", plan_seq, mega, plan_seq.comm_s / plan_seq.step_s);
    Result seq_fair_shown = seq_fair;
    seq_fair_shown.exposed_s = plan_seq_fair.exposed_s;
    row("host (no model)", "seq T+1 thr", seq_fair_shown, mega,
        plan_seq_fair.comm_s / plan_seq_fair.step_s);
    row("host (no model)", "tbt T+1 thr", plan_seq_fair, mega,
        plan_seq_fair.comm_s / plan_seq_fair.step_s);
    *equal = same(seq.out, plan_seq.out);
    if (root_)
      std::printf(
          "MegaMoE all-to-all bytes per step (fwd + bwd, to other ranks, most of any rank): "
          "%lld (%s rows)\n",
          (long long)mega.bytes, std::string(dtype_name(options_.dt)).c_str());
    return plan_seq;
  }

  // The link model at comm shares of the task-by-task host run `plan_seq`.
  void link_model_rows(const Result& plan_seq) const {
    const double compute_s = plan_seq.step_s - plan_seq.comm_s;  // the step without communication
    for (double share : {0.17, 0.30, 0.50}) {
      // comm / (compute + comm) = share in the task-by-task run, every call's modelled transfer in
      // turn: the bandwidth that moves this rank's bytes in share / (1 − share) × compute.
      multicore::LinkModel m;
      m.gbps = double(plan_seq.bytes) / (share / (1.0 - share) * compute_s) / 1e9;
      g_link = m;
      const Result b = best_of(1), o = best_of(2), b_fair = best_of_fair(1);
      char name[64];
      std::snprintf(name, sizeof name, "model %.0f%% (%.3g GB/s)", share * 100, m.gbps);
      row(name, "task-by-task", b, o, b.comm_s / b.step_s);
      row(name, "tbt T+1 thr", b_fair, o, b_fair.comm_s / b_fair.step_s);
    }
  }

 private:
  // The best of HP_MC_REPS steps of `kind` (step()), each figure the slowest rank's.
  Result best_of(int kind) const {
    Result best;
    best.step_s = 1e30;
    for (int r = 0; r < options_.reps; ++r) {
      Result x = step(layer_, ep_, kind, options_.groups);
      if (x.step_s < best.step_s) best = std::move(x);
    }
    best.step_s = slowest(*ep_, best.step_s);
    best.exposed_s = slowest(*ep_, best.exposed_s);
    best.comm_s = slowest(*ep_, best.comm_s);
    best.compute_s = slowest(*ep_, best.compute_s);
    best.bytes = int64_t(slowest(*ep_, double(best.bytes)));
    return best;
  }

  // Baseline `kind` with one more pool thread: MegaMoE's compute-thread budget (see the top).
  Result best_of_fair(int kind) const {
    set_num_threads(threads_ + 1);
    Result r = best_of(kind);
    set_num_threads(threads_);
    return r;
  }

  void row(const std::string& name, const std::string& base_name, const Result& base,
           const Result& mega, double comm_share) const {
    if (!root_) return;
    std::printf(
        "%-24s %-12s %5.0f%% %9.1f %9.1f %6.2fx %5.2fx %6.0f ms (%3.0f%%) %6.0f ms (%3.0f%%) %8.1f "
        "%6s\n",
        name.c_str(), base_name.c_str(), comm_share * 100, base.step_s * 1e3, mega.step_s * 1e3,
        base.step_s / mega.step_s, 1.0 / (1.0 - std::min(comm_share, 0.99)), base.exposed_s * 1e3,
        100 * base.exposed_s / base.step_s, mega.exposed_s * 1e3,
        100 * mega.exposed_s / mega.step_s, flops_ / mega.step_s / 1e9,
        same(base.out, mega.out) ? "yes" : "NO");
  }

  dist::CommPtr ep_;
  const Options& options_;
  const Layer& layer_;
  const bool root_;
  const int threads_;  // the pool's threads (T)
  const double flops_;
};

void print_header(const Options& o, int n, int64_t own_experts, double ceiling, int64_t rows) {
  const DType dt = o.dt;
  std::printf(
      "ranks %d, per rank: tokens %lld, hidden %lld, inter %lld, experts %lld (%lld here), "
      "top-%lld, MegaMoE groups %lld; %d cube + 1 vector + comm worker per rank, best of %d; "
      "experts %s\n",
      n, (long long)o.tokens, (long long)o.H, (long long)o.I, (long long)o.E,
      (long long)own_experts, (long long)o.k, (long long)o.groups, num_threads(), o.reps,
      g_mx ? (dt == DType::bf16 ? "MXFP8 E4M3, bf16 rows and weights" : "MXFP8 E4M3, f32")
           : (dt == DType::bf16 ? "f32, bf16 rows and weights" : "f32"));
  std::printf(
      "GEMM ceiling: %.1f GFLOP/s per rank (gemm_f32 [%lld, %lld]·[%lld, %lld]ᵀ, 1 thread, "
      "all ranks at once)\n",
      ceiling, (long long)rows, (long long)o.H, (long long)o.I, (long long)o.H);
  std::printf("%-24s %-12s %6s %9s %9s %7s %6s %16s %16s %8s %6s\n", "link", "baseline", "comm%",
              "base ms", "mega ms", "speedup", "bound", "exposed base", "exposed mega", "GF/s",
              "equal");
}

// HP_MC_TRACE=PREFIX: one overlapped host step's Chrome traces, PREFIX.{fwd,bwd}.rank<r>.json;
// false when a file cannot be written.
bool write_traces(const char* prefix, const Layer& l, const dist::CommPtr& ep, int64_t groups) {
  g_link = multicore::LinkModel{};
  g_trace = true;
  step(l, ep, 2, groups);
  g_trace = false;
  for (const auto& [dir, stats] : {std::pair{"fwd", moe::megamoe_last_forward()},
                                   std::pair{"bwd", moe::megamoe_last_backward()}}) {
    const std::string path =
        std::string(prefix) + "." + dir + ".rank" + std::to_string(ep->rank()) + ".json";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs(stats.chrome_trace.c_str(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "bench_megamoe: cannot write %s\n", path.c_str());
      return false;
    }
  }
  if (ep->rank() == 0) std::printf("Chrome traces: %s.{fwd,bwd}.rank<r>.json\n", prefix);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  auto ep = dist::world();
  const int rank = ep->rank(), n = ep->size();
  const bool root = rank == 0;
  Options o;
  if (!parse_options(argc, argv, root, &o)) return 2;
  const Layer l = make_layer(o, rank, n);
  const int64_t rows = std::max<int64_t>(1, n * o.tokens * o.k / o.E);  // an expert's mean rows
  const double ceiling = gemm_ceiling(*ep, o, rows);
  if (root) print_header(o, n, moe::local_experts(o.E, n, rank).count, ceiling, rows);
  const Bench bench(ep, o, l);
  bool equal = false;
  const Result plan_seq = bench.host_rows(&equal);
  bench.link_model_rows(plan_seq);
  if (root)
    std::printf("sequential EP layer vs task-by-task plan bitwise equal: %s\n",
                equal ? "yes" : "NO");
  if (const char* prefix = std::getenv("HP_MC_TRACE"); prefix && *prefix)
    if (!write_traces(prefix, l, ep, o.groups)) return 1;
  return 0;
}
