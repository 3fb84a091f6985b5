// FSDP across ranks (run at 1-4 ranks by ctest dist_np1..4): padded all-gather / reduce-scatter
// of uneven parameters round-trip exactly (dims 7 and 5: an empty shard at 4 ranks); N-rank
// training of a tiny Qwen3 equals one-rank training (reshard on/off, recompute, micro-batches,
// no prefetch, bf16 compute, HSDP on a 2×2 mesh, a zero-bubble split backward with the
// reduction at finish_grads); bytes sent equal the FSDP volume formula.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "fsdp/tiny_model.h"
#include "hp/core/tensor_data.h"
#include "hp/fsdp/fsdp.h"
#include "hp/optim/optimizer.h"
#include "hp/pipeline/weight_grad.h"
#include "hp/shard/mesh.h"
#include "hp/shard/placement.h"

namespace hp::fsdp {
namespace {

using shard::chunk_range;

// blk.a [7, 3], blk.b [5] in a group; root.c [5, 2] in the root group (first in FQN order: own
// parameters come before children's). Values 1, 2, ... (exact in
// bf16). The block's forward reads its gathered parameters and returns Σ a·ca + Σ b·cb (+ x).
class Block : public nn::Module {
 public:
  Block() {
    a = register_parameter("a", reshape(arange(1, 22, 1, DType::f32), {7, 3}));
    b = register_parameter("b", arange(1, 6, 1, DType::f32));
  }
  Tensor forward(const Tensor& x, const Tensor& ca, const Tensor& cb) {
    return wrapped_forward(x, [this, ca, cb](const Tensor& in) {
      seen_a = a.to_vector();
      seen_b = b.to_vector();
      seen_dtype = a.dtype();
      return add(in, add(sum(mul(a, ca)), sum(mul(b, cb))));
    });
  }
  Tensor a, b;
  std::vector<double> seen_a, seen_b;
  DType seen_dtype = DType::f32;
};

class Root : public nn::Module {
 public:
  Root() {
    blk = register_module("blk", std::make_shared<Block>());
    c = register_parameter("c", reshape(arange(1, 11, 1, DType::f32), {5, 2}));
  }
  std::shared_ptr<Block> blk;
  Tensor c;
};

// A parameter's FSDP shard: its first global row (from its DTensor) and the f32 master rows.
struct ShardRows {
  std::string fqn;
  int64_t row_offset = 0;
  Tensor shard;
};
std::vector<ShardRows> rows_of(const FsdpModel& f) {  // collective, as FsdpModel::parameters
  std::vector<ShardRows> out;
  for (auto& [fqn, d] : f.parameters()) out.push_back({fqn, d.offsets().at(0), d.local()});
  return out;
}

TEST(FsdpDist, UnevenShardsRoundTripExactly) {
  auto world = dist::world();
  const int64_t w = world->size(), me = world->rank();
  for (DType dt : {DType::f32, DType::bf16}) {
    Root root;
    const std::vector<double> full_a = root.blk->a.to_vector(), full_b = root.blk->b.to_vector(),
                              full_c = root.c.to_vector();
    FsdpOptions o;
    o.param_dtype = o.reduce_dtype = dt;
    FsdpModel f(root, {{"blk", root.blk.get(), {}, nullptr}}, world, nullptr, o);
    // Shards: this rank's torch.chunk rows, possibly none (5 rows over 4 ranks: 2, 2, 1, 0).
    auto info = rows_of(f);
    ASSERT_EQ(info.size(), 3u);
    const std::vector<std::pair<int64_t, std::vector<double>>> want = {
        {5, full_c}, {7, full_a}, {5, full_b}};
    for (size_t k = 0; k < 3; ++k) {
      const auto [rows, values] = want[k];
      const int64_t row_numel = static_cast<int64_t>(values.size()) / rows;
      const auto range = chunk_range(rows, w, me);
      EXPECT_EQ(info[k].row_offset, range.start) << info[k].fqn;
      EXPECT_EQ(info[k].shard.size(0), range.length) << info[k].fqn;
      EXPECT_EQ(info[k].shard.to_vector(),
                std::vector<double>(values.begin() + range.start * row_numel,
                                    values.begin() + (range.start + range.length) * row_numel));
    }
    EXPECT_EQ(info[0].fqn, "c");
    EXPECT_EQ(info[1].fqn, "blk.a");
    // Gradient of every element = (rank + 1) · (index + 1): the reduced sum is W(W+1)/2 · (i + 1).
    auto coef = [&](int64_t n, const Shape& s) {
      return mul(reshape(arange(1, static_cast<double>(n) + 1, 1, dt), s),
                 static_cast<double>(me + 1));
    };
    for (int mb = 0; mb < 2; ++mb) {  // two micro-batches: the sums accumulate
      Tensor x = ones({1}, dt).requires_grad_();
      Tensor y = root.blk->forward(x, coef(21, {7, 3}), coef(5, {5}));
      EXPECT_EQ(root.blk->seen_a, full_a);
      EXPECT_EQ(root.blk->seen_b, full_b);
      EXPECT_EQ(root.blk->seen_dtype, dt);
      // Freed after forward (f32 on a world of one: the module's parameters are the masters).
      EXPECT_EQ(has_data(root.blk->a), f.passthrough());
      EXPECT_EQ(root.c.to_vector(), full_c);  // the root stays gathered
      add(sum(y), sum(mul(root.c, coef(10, {5, 2})))).backward();
      EXPECT_EQ(has_data(root.blk->a), f.passthrough());
    }
    f.finish_grads();
    EXPECT_EQ(has_data(root.c), f.passthrough());
    EXPECT_EQ(f.passthrough(), w == 1 && dt == DType::f32);
    const double tri = static_cast<double>(w * (w + 1));  // 2 micro-batches · W(W+1)/2
    for (size_t k = 0; k < 3; ++k) {
      const int64_t row_numel = static_cast<int64_t>(want[k].second.size()) / want[k].first;
      std::vector<double> g;
      for (int64_t i = 0; i < info[k].shard.numel(); ++i)
        g.push_back(tri * static_cast<double>(info[k].row_offset * row_numel + i + 1));
      ASSERT_TRUE(info[k].shard.grad().defined()) << info[k].fqn;
      EXPECT_EQ(info[k].shard.grad().dtype(), DType::f32);
      EXPECT_EQ(info[k].shard.grad().to_vector(), g) << info[k].fqn << " " << dtype_name(dt);
    }
  }
}

// ---------------------------------------------------------------- training equivalence

constexpr int64_t kRows = 12, kSeq = 8, kSteps = 3;
constexpr double kLr = 1e-2;
const double kScale = 1.0 / static_cast<double>(kRows * (kSeq - 1));  // 1 / global tokens

struct TrainResult {
  std::vector<double> losses;     // global loss per step
  std::vector<ShardRows> shards;  // final masters
  std::vector<Tensor> grads0;     // their gradients at the first step
  FsdpModel::Stats stats;
};

Tensor step_batch(int64_t step, int64_t rows, int64_t row0) {
  return testing::token_batch(100 + static_cast<uint64_t>(step), rows, kSeq, 37, row0);
}

// One rank, no FSDP, the whole global batch.
TrainResult reference_run() {
  auto m = testing::tiny_model(42);
  optim::Optimizer opt(m->named_parameters(), {});
  TrainResult r;
  for (int64_t s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    Tensor l = testing::scaled_sum_loss(*m, step_batch(s, kRows, 0), kScale);
    l.backward();
    r.losses.push_back(l.item());
    if (s == 0)
      for (auto& [fqn, t] : m->named_parameters()) r.grads0.push_back(t.grad().clone());
    opt.step(kLr);
  }
  for (auto& [fqn, t] : m->named_parameters()) r.shards.push_back({fqn, 0, t});
  return r;
}

struct RunSetup {
  FsdpOptions fsdp;
  bool recompute = false;
  int64_t micro = 1;
  bool hsdp = false;  // 2×2 mesh (4 ranks)
  // Zero-bubble split (pipeline/weight_grad.h): every micro-batch's backward queues its linears'
  // weight gradients, run after the last micro-batch's backward (the latest a schedule's W runs).
  bool split = false;
};

// This rank's slice of every step's global batch (data rank = world rank), in `micro` pieces.
TrainResult fsdp_run(const RunSetup& su) {
  auto world = dist::world();
  dist::CommPtr shard_comm = world, replicate_comm;
  std::shared_ptr<shard::DeviceMesh> mesh;
  if (su.hsdp) {
    const int64_t w = world->size(), shards = w == 4 ? 2 : 1;
    mesh = std::make_shared<shard::DeviceMesh>(
        std::vector<std::pair<std::string, int64_t>>{{"dp_replicate", w / shards},
                                                     {"dp_shard", shards}},
        world);
    shard_comm = mesh->axis_comm("dp_shard");
    replicate_comm = mesh->axis_comm("dp_replicate");
  }
  auto m = testing::tiny_model(42);
  if (su.recompute) testing::add_recompute(*m);
  if (su.split) pipeline::install_deferred_linears(*m);
  FsdpModel f(*m, groups_by_glob(*m, {"model.layers.*"}), shard_comm, replicate_comm, su.fsdp);
  optim::Optimizer opt(f.sharded_parameters(), {});
  const auto mine = chunk_range(kRows, world->size(), world->rank());
  TrainResult r;
  for (int64_t s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    double local = 0;
    pipeline::WeightGradTasks deferred;
    for (int64_t k = 0; k < su.micro; ++k) {
      const auto piece = chunk_range(mine.length, su.micro, k);
      if (piece.length == 0) continue;
      Tensor l = testing::scaled_sum_loss(*m, step_batch(s, piece.length, mine.start + piece.start),
                                          kScale);
      std::optional<pipeline::WeightGradCapture> capture;
      if (su.split) capture.emplace(&deferred);
      l.backward();
      local += l.item();
    }
    for (const auto& w : deferred) w();
    f.finish_grads();
    if (s == 0)
      for (auto& [fqn, t] : f.sharded_parameters()) r.grads0.push_back(t.grad().clone());
    opt.step(kLr);
    r.losses.push_back(world->all_reduce(from_vector({local}, {1}, DType::f64)).item());
  }
  r.shards = rows_of(f);
  r.stats = f.stats();
  return r;
}

// max |this rank's rows of `got` - the same rows of `full`| / max |full|.
double rel_rows_diff(const Tensor& got, int64_t row_offset, const Tensor& full) {
  // (A rank's uneven shard may have no rows: then there is nothing to compare.)
  const int64_t row_numel = full.size(0) > 0 ? full.numel() / full.size(0) : 0;
  const auto want = full.to_vector(), have = got.to_vector();
  double scale = 1e-30, diff = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < have.size(); ++i)
    diff =
        std::max(diff, std::abs(have[i] - want[static_cast<size_t>(row_offset * row_numel) + i]));
  return diff / scale;
}

// Losses of every step, first-step gradients and (param_tol > 0) final masters, relative to the
// largest reference magnitude. `bitwise`: exact equality at one rank (f32 on a world of one is
// the plain model, unless micro-batches change the summation order).
void expect_matches(const TrainResult& got, const TrainResult& ref, double tol, double param_tol,
                    const std::string& what, bool bitwise_at_one_rank = true) {
  const bool bitwise = bitwise_at_one_rank && dist::world()->size() == 1;
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    if (bitwise)
      EXPECT_EQ(got.losses[s], ref.losses[s]) << what << " step " << s;
    else
      EXPECT_NEAR(got.losses[s], ref.losses[s], tol * std::abs(ref.losses[s]))
          << what << " step " << s;
  }
  ASSERT_EQ(got.shards.size(), ref.shards.size());
  ASSERT_EQ(got.grads0.size(), ref.grads0.size());
  for (size_t k = 0; k < ref.shards.size(); ++k) {
    const auto& g = got.shards[k];
    ASSERT_EQ(g.fqn, ref.shards[k].fqn);
    EXPECT_LE(rel_rows_diff(got.grads0[k], g.row_offset, ref.grads0[k]), bitwise ? 0.0 : tol)
        << what << " grad " << g.fqn;
    if (param_tol > 0) {
      EXPECT_LE(rel_rows_diff(g.shard, g.row_offset, ref.shards[k].shard),
                bitwise ? 0.0 : param_tol)
          << what << " " << g.fqn;
    }
  }
}

// Elements of the padded segments S (Σ ceil(n/W)·row elements over a group's parameters) of the
// tiny model's decoder layers (summed) and of its root group, at W ranks.
struct PaddedSegments {
  int64_t layers = 0, root = 0;
};
PaddedSegments padded_segments(int64_t w) {
  auto m = testing::tiny_model(42);
  auto padded = [w](const Tensor& t) {
    return shard::chunk_size(t.size(0), w) * (t.numel() / t.size(0));
  };
  PaddedSegments out;
  for (auto& [fqn, t] : m->named_parameters())
    (fqn.rfind("model.layers.", 0) == 0 ? out.layers : out.root) += padded(t);
  return out;
}

const TrainResult& reference() {
  static const TrainResult r = reference_run();
  return r;
}

FsdpOptions f32_options(bool reshard, bool prefetch = true) {
  FsdpOptions o;
  o.param_dtype = o.reduce_dtype = DType::f32;
  o.reshard_after_forward = reshard;
  o.prefetch = prefetch;
  return o;
}

// f32 everywhere: per-rank gradient terms summed by the reduce-scatter differ from the one-rank
// gradient only in summation order (a few f32 ulps); after three AdamW steps losses, gradients and
// masters agree to 1e-5 relative (observed at 2-4 ranks: at most 2e-6).
constexpr double kTol = 1e-5;

TEST(FsdpDist, TrainingMatchesOneRank) {
  const TrainResult a = fsdp_run({f32_options(true)});
  expect_matches(a, reference(), kTol, kTol, "reshard");
  expect_matches(fsdp_run({f32_options(false)}), reference(), kTol, kTol, "keep after forward");
  // Prefetch changes when collectives start, never what they compute.
  const TrainResult np = fsdp_run({f32_options(true, false)});
  EXPECT_EQ(np.losses, a.losses);
  if (dist::world()->size() > 1) {
    EXPECT_GT(a.stats.all_gather_bytes, 0);
  }
}

TEST(FsdpDist, TrainingWithRecomputeAndMicroBatchesMatchesOneRank) {
  RunSetup su{f32_options(true)};
  su.recompute = true;
  su.micro = 2;
  expect_matches(fsdp_run(su), reference(), kTol, kTol, "recompute + 2 micro-batches", false);
}

// HSDP: 2 replicas × 2 shards at 4 ranks; elsewhere W replicas of an unsharded model (reduction
// = all-reduce only).
TEST(FsdpDist, HsdpMatchesOneRank) {
  RunSetup su{f32_options(true)};
  su.hsdp = true;
  const TrainResult r = fsdp_run(su);
  expect_matches(r, reference(), kTol, kTol, "hsdp");
  const int64_t w = dist::world()->size();
  EXPECT_EQ(r.stats.all_reduce_bytes > 0, w > 1);
  EXPECT_EQ(r.stats.all_gather_bytes > 0, w == 4);
}

// bf16 compute on N ranks vs bf16 compute on one process (FSDP over a world of one): the bf16
// gradients of each rank's slice are summed in f32 instead of being one bf16 gradient of the
// whole batch, so they differ by bf16 rounding (2^-8 relative): losses and first-step gradients
// checked at 2e-2. (Masters are not compared: AdamW turns sign flips of near-zero gradients into
// full lr-sized steps.)
TEST(FsdpDist, Bf16TrainingMatchesOneProcessBf16) {
  FsdpOptions o;  // bf16 params, f32 reduce
  RunSetup su{o};
  const TrainResult got = fsdp_run(su);
  TrainResult ref;
  {
    auto m = testing::tiny_model(42);
    FsdpModel f(*m, groups_by_glob(*m, {"model.layers.*"}), nullptr, nullptr, o);
    optim::Optimizer opt(f.sharded_parameters(), {});
    for (int64_t s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      Tensor l = testing::scaled_sum_loss(*m, step_batch(s, kRows, 0), kScale);
      l.backward();
      f.finish_grads();
      if (s == 0)
        for (auto& [fqn, t] : f.sharded_parameters()) ref.grads0.push_back(t.grad().clone());
      opt.step(kLr);
      ref.losses.push_back(l.item());
    }
    ref.shards = rows_of(f);
  }
  expect_matches(got, ref, 2e-2, 0, "bf16", false);
  // Bytes per step = the FSDP volume: per group (W-1)·S per all-gather — two per layer (forward,
  // backward), one for the root — plus one reduce-scatter each.
  const int64_t w = dist::world()->size();
  const PaddedSegments seg = padded_segments(w);
  EXPECT_EQ(got.stats.all_gather_bytes, kSteps * (w - 1) * (2 * seg.layers + seg.root) * 2);
  EXPECT_EQ(got.stats.reduce_scatter_bytes, kSteps * (w - 1) * (seg.layers + seg.root) * 4);
}

// A zero-bubble split backward (pipeline/weight_grad.h) with reduce_at_finish: two micro-batches'
// backwards queue their linears' weight gradients, which run only after both (where FSDP without
// reduce_at_finish would already have reduced each group twice per micro-batch). The gradients
// wait unsharded for finish_grads, so the run equals one rank (f32) and the same bf16 FSDP run
// without the split, and each group is reduce-scattered once per step, not per micro-batch.
TEST(FsdpDist, SplitBackwardReducedAtFinishMatchesOneRank) {
  RunSetup su{f32_options(true)};
  su.fsdp.reduce_at_finish = su.split = true;
  su.micro = 2;
  const TrainResult r = fsdp_run(su);
  expect_matches(r, reference(), kTol, kTol, "split backward, reduced at finish", false);
  const int64_t w = dist::world()->size();
  const PaddedSegments seg = padded_segments(w);
  EXPECT_EQ(r.stats.reduce_scatter_bytes, kSteps * (w - 1) * (seg.layers + seg.root) * 4);
  // Gathers are unchanged by the split: forward and I's backward per micro-batch, root once.
  EXPECT_EQ(r.stats.all_gather_bytes,
            kSteps * (w - 1) * (2 * su.micro * seg.layers + seg.root) * 4);

  RunSetup bf{FsdpOptions{}};  // bf16 params, f32 reduce
  bf.micro = 2;
  const TrainResult plain = fsdp_run(bf);
  bf.fsdp.reduce_at_finish = bf.split = true;
  const TrainResult sp = fsdp_run(bf);
  // The same layout: this rank's shards side by side. The first step's gradients sum the same
  // bf16 micro-batch gradients in f32, in another order across ranks (bitwise at one rank).
  const double tol = dist::world()->size() == 1 ? 0.0 : kTol;
  ASSERT_EQ(sp.grads0.size(), plain.grads0.size());
  for (size_t k = 0; k < plain.grads0.size(); ++k) {
    ASSERT_EQ(sp.grads0[k].shape(), plain.grads0[k].shape()) << plain.shards[k].fqn;
    EXPECT_LE(rel_rows_diff(sp.grads0[k], 0, plain.grads0[k]), tol) << plain.shards[k].fqn;
  }
  for (size_t s = 0; s < plain.losses.size(); ++s)
    EXPECT_NEAR(sp.losses[s], plain.losses[s], 2e-2 * std::abs(plain.losses[s])) << "step " << s;
}

}  // namespace
}  // namespace hp::fsdp
