// Optimizers on sharded parameters (docs/ARCHITECTURE.md §4) against an unsharded optimizer on full
// copies: every rank holds its torch.chunk rows of each sharded parameter (FSDP; empty ones at 3-4
// ranks) or its 2-D block (tensor parallel columns, then rows), all see the same gradients, and
// after every step each shard must equal the reference's part bitwise — Muon's owner runs the same
// Newton–Schulz on the same full matrix, AdamW is elementwise. Plus the global gradient norm across
// shards and the shard-spec (box tiling) / participation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "hp/dist/communicator.h"
#include "hp/optim/grad.h"
#include "hp/optim/optimizer.h"
#include "hp/shard/placement.h"

namespace hp::optim {
namespace {

struct ParamDef {
  std::string fqn;
  Shape shape;
  bool sharded;
};
// Matrices split unevenly (7, 5 and 16 rows; 5 over 4 ranks leaves rank 3 empty), a one-row matrix
// held whole by rank 0, a stacked expert tensor sharded on its stack dim, a replicated matrix, a
// sharded bias and a replicated norm weight.
const std::vector<ParamDef> kParams = {
    {"a.weight", {7, 5}, true}, {"b.weight", {5, 3}, true},     {"c.weight", {16, 8}, true},
    {"e.weight", {1, 6}, true}, {"experts.w", {2, 6, 4}, true}, {"r.weight", {4, 6}, false},
    {"a.bias", {7}, true},      {"norm.weight", {5}, false},
};

// Deterministic values in [-1, 1) for (param, step); 0.5 + ... for initial weights.
Tensor pattern(size_t param, int step, const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  uint64_t s = param * 7919 + static_cast<uint64_t>(step) * 104729 + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0;
  }
  return from_vector(v, shape);
}

// Rows [start, start + len) of a contiguous tensor, as a new contiguous tensor.
Tensor rows_of(const Tensor& t, shard::ChunkRange r) {
  Shape s = t.shape();
  const int64_t row = t.numel() / s[0];
  s[0] = r.length;
  Tensor out = empty(s);
  if (r.length > 0)
    std::memcpy(out.data<float>(), t.data<float>() + r.start * row,
                static_cast<size_t>(r.length * row) * sizeof(float));
  return out;
}

// The reference (full tensors, unsharded optimizer) and this rank's shards.
struct Model {
  std::vector<NamedTensor> full, local;
  std::map<std::string, ShardSpec> specs;
  std::vector<shard::ChunkRange> ranges;  // this rank's rows of each parameter (all of a replica)

  explicit Model(const dist::CommPtr& c) {
    for (size_t i = 0; i < kParams.size(); ++i) {
      const ParamDef& d = kParams[i];
      Tensor f = pattern(i, -1, d.shape);
      shard::ChunkRange r{0, d.shape[0]};
      if (d.sharded) {
        r = shard::chunk_range(d.shape[0], c->size(), c->rank());
        specs[d.fqn] = row_shard(d.shape, r.start, c);
      }
      full.emplace_back(d.fqn, f);
      local.emplace_back(d.fqn, rows_of(f, r));
      ranges.push_back(r);
    }
  }
  std::vector<Tensor> tensors(const std::vector<NamedTensor>& named) const {
    std::vector<Tensor> out;
    for (const auto& [n, t] : named) out.push_back(t);
    return out;
  }
  // Gradients of step `step` (norm ~9).
  void set_grads(int step) {
    for (size_t i = 0; i < kParams.size(); ++i) {
      Tensor g = pattern(i, step, kParams[i].shape);
      full[i].second.set_grad(g);
      local[i].second.set_grad(rows_of(g, ranges[i]));
    }
  }
};

// Bitwise equality of a shard with its rows of the reference.
void expect_rows_equal(const Tensor& ref_full, const Tensor& shard, shard::ChunkRange r,
                       const std::string& what) {
  const Tensor want = rows_of(ref_full.contiguous(), r);
  ASSERT_EQ(shard.shape(), want.shape()) << what;
  EXPECT_EQ(std::memcmp(shard.data<float>(), want.data<float>(), want.nbytes()), 0)
      << what << ": shard differs from the reference rows";
}

void check_steps_match(Algorithm algo) {
  auto c = dist::world();
  Model m(c);
  OptimizerOptions o;
  o.default_algorithm = algo;
  o.groups.push_back({"vectors", {"*.bias", "norm.*"}, Algorithm::adamw, 1.0, std::nullopt});
  Optimizer ref(m.full, o), opt(m.local, o, m.specs);
  for (int step = 0; step < 3; ++step) {
    m.set_grads(step);
    ref.step(0.02);
    opt.step(0.02);
    for (size_t i = 0; i < kParams.size(); ++i)
      expect_rows_equal(m.full[i].second, m.local[i].second, m.ranges[i],
                        kParams[i].fqn + " after step " + std::to_string(step + 1));
  }
  // State: the same keys, each holding this rank's rows (empty shards included).
  auto want = ref.state_dict(), got = opt.state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].first, want[k].first);
    if (want[k].second.dtype() != DType::f32) {
      EXPECT_EQ(got[k].second.item(), want[k].second.item()) << want[k].first;
      continue;
    }
    size_t i = 0;
    while (want[k].first.rfind("state." + kParams[i].fqn + ".", 0) != 0) ++i;
    expect_rows_equal(want[k].second, got[k].second, m.ranges[i], want[k].first);
  }
}

TEST(ShardedOptim, MuonStepsEqualUnshardedBitwise) {
  check_steps_match(Algorithm::auto_select);
}

TEST(ShardedOptim, AdamWStepsEqualUnshardedBitwise) {
  check_steps_match(Algorithm::adamw);
}

TEST(ShardedOptim, StateDictOfShardsResumesIdentically) {
  auto c = dist::world();
  Model m(c);
  OptimizerOptions o;
  o.default_algorithm = Algorithm::auto_select;
  o.groups.push_back({"vectors", {"*.bias", "norm.*"}, Algorithm::adamw, 1.0, std::nullopt});
  Optimizer a(m.local, o, m.specs);
  m.set_grads(0);
  a.step(0.02);
  // A second optimizer over copies of the shards, resumed from a's state.
  std::vector<NamedTensor> copies;
  for (const auto& [n, t] : m.local) copies.emplace_back(n, t.clone());
  Optimizer b(copies, o, m.specs);
  b.load_state_dict(a.state_dict());
  m.set_grads(1);
  for (size_t i = 0; i < copies.size(); ++i) copies[i].second.set_grad(m.local[i].second.grad());
  a.step(0.01);
  b.step(0.01);
  for (size_t i = 0; i < copies.size(); ++i)
    expect_rows_equal(m.local[i].second, copies[i].second, {0, m.local[i].second.size(0)},
                      kParams[i].fqn + " after resume");
}

TEST(ShardedOptim, GlobalGradNormEqualsUnsharded) {
  auto c = dist::world();
  Model m(c);
  std::vector<Tensor> sharded, replicated;
  for (size_t i = 0; i < kParams.size(); ++i)
    (kParams[i].sharded ? sharded : replicated).push_back(m.local[i].second);
  // Measuring only (max_norm 0) leaves the gradients alone.
  m.set_grads(0);
  const double full = clip_grad_norm(m.tensors(m.full), 0);
  const double got = clip_grad_norm(sharded, replicated, 0, *c);
  EXPECT_NEAR(got, full, 1e-14 * full);
  for (size_t i = 0; i < kParams.size(); ++i)
    expect_rows_equal(m.full[i].second.grad(), m.local[i].second.grad(), m.ranges[i],
                      kParams[i].fqn + " grad (unclipped)");
  // Clipping at 1 (the norm is ~9): the same factor everywhere, up to the norm's last bits.
  const double clipped = clip_grad_norm(sharded, replicated, 1.0, *c);
  clip_grad_norm(m.tensors(m.full), 1.0);
  EXPECT_EQ(clipped, got);
  ASSERT_GT(got, 2.0);
  for (size_t i = 0; i < kParams.size(); ++i) {
    const auto want = rows_of(m.full[i].second.grad(), m.ranges[i]).to_vector();
    const auto have = m.local[i].second.grad().to_vector();
    ASSERT_EQ(have.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(have[k], want[k], 2.5e-7 * std::fabs(want[k]))
          << kParams[i].fqn << "[" << k << "]";
  }
  // Every rank got the same bits.
  Tensor all = c->all_gather(from_data<double>({got}, {1}));
  for (int r = 0; r < c->size(); ++r) EXPECT_EQ(all.data<double>()[r], got) << "rank " << r;
}

TEST(ShardedOptim, SpecErrorsThrowOnEveryRank) {
  auto c = dist::world();
  Model m(c);
  // One rank's spec does not fit its tensor: the others learn of it in the exchange.
  auto bad = m.specs;
  if (c->rank() == c->size() - 1) bad["c.weight"].global_shape = {16, 7};
  try {
    Optimizer(m.local, {}, bad);
    FAIL() << "mismatched spec accepted";
  } catch (const ValueError& e) {
    const std::string want = c->rank() == c->size() - 1 ? "c.weight: local shard" : "rejected";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  // Every rank claiming all rows from 0: a valid tiling only on a world of one.
  std::map<std::string, ShardSpec> overlap = {{"a.weight", row_shard({7, 5}, 0, c)}};
  std::vector<NamedTensor> whole = {{"a.weight", pattern(0, -1, {7, 5})}};
  if (c->size() == 1) {
    EXPECT_NO_THROW(Optimizer(whole, {}, overlap));
  } else {
    try {
      Optimizer(whole, {}, overlap);
      FAIL() << "overlapping shards accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "a.weight: the boxes of ranks 0 ([0:7, 0:5]) and 1 ([0:7, 0:5]) overlap "
                    "in global shape [7, 5]"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ShardedOptim, MuonStepNeedsTheSameGradientsOnEveryRank) {
  auto c = dist::world();
  Model m(c);
  OptimizerOptions o;
  o.default_algorithm = Algorithm::auto_select;
  o.groups.push_back({"vectors", {"*.bias", "norm.*"}, Algorithm::adamw, 1.0, std::nullopt});
  Optimizer opt(m.local, o, m.specs);
  m.set_grads(0);
  if (c->size() == 1) {  // nothing is split, so there is nothing to disagree on
    m.local[0].second.zero_grad();
    EXPECT_NO_THROW(opt.step(0.02));
    return;
  }
  if (c->rank() == 1) m.local[0].second.zero_grad();  // a.weight: no gradient on rank 1 only
  try {
    opt.step(0.02);
    FAIL() << "step with mismatched gradients went through";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of the shard group steps"), std::string::npos)
        << e.what();
  }
}

// --- 2-D blocks (tensor parallelism's Shard(1) columns, then FSDP's rows) ---

// This rank's box of `shape` (2-D, or stacked with the split on the last two dims): at 4 ranks a
// 2 × 2 grid — columns split by the torch.chunk rule over 2 (rank / 2), then each column block's
// rows over 2 (rank % 2); at 2 or 3 ranks columns only; at 1 the whole tensor.
ShardBox grid_box(const Shape& shape, int world, int rank) {
  const int tp = world == 4 ? 2 : world, dp = world / tp;
  const size_t d = shape.size();
  const shard::ChunkRange cols = shard::chunk_range(shape[d - 1], tp, rank / dp);
  const shard::ChunkRange rows = shard::chunk_range(shape[d - 2], dp, rank % dp);
  ShardBox b{std::vector<int64_t>(d, 0), shape};
  b.offsets[d - 1] = cols.start;
  b.sizes[d - 1] = cols.length;
  b.offsets[d - 2] = rows.start;
  b.sizes[d - 2] = rows.length;
  return b;
}

// Flat element index in a contiguous tensor of `full` shape of the i-th element of box b.
int64_t full_index(const ShardBox& b, const Shape& full, int64_t i) {
  int64_t at = 0, stride = 1;
  for (size_t d = full.size(); d-- > 0;) {
    at += (b.offsets[d] + i % b.sizes[d]) * stride;
    i /= b.sizes[d];
    stride *= full[d];
  }
  return at;
}

// Box b of a contiguous tensor, as a new contiguous tensor.
Tensor block_of(const Tensor& t, const ShardBox& b) {
  const Tensor src = t.contiguous();
  Tensor out = empty(b.sizes);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = src.data<float>()[full_index(b, t.shape(), i)];
  return out;
}

// Every rank's block of `shape` gathered into a full tensor; NaN where no rank put an element.
Tensor gather_blocks(const Tensor& block, const Shape& shape, dist::Communicator& c) {
  std::vector<int64_t> counts;
  for (int r = 0; r < c.size(); ++r) counts.push_back(grid_box(shape, c.size(), r).numel());
  const Tensor flat = block.contiguous();
  const Tensor all = c.all_gather_v(flat.as_strided({flat.numel()}, {1}, flat.offset()), counts);
  Tensor out = full(shape, std::nan(""));
  int64_t pos = 0;
  for (int r = 0; r < c.size(); ++r) {
    const ShardBox b = grid_box(shape, c.size(), r);
    for (int64_t i = 0; i < b.numel(); ++i)
      out.data<float>()[full_index(b, shape, i)] = all.data<float>()[pos + i];
    pos += b.numel();
  }
  return out;
}

const std::vector<ParamDef> kBlockParams = {
    {"m.weight", {7, 10}, true},     // muon
    {"n.weight", {10, 7}, true},     // muon
    {"s.weight", {3, 2}, true},      // muon; at 3 ranks rank 2's block is empty
    {"experts.w", {2, 5, 6}, true},  // muon, stacked, each matrix split
    {"x.weight", {7, 10}, true},     // adamw
};

TEST(BlockShardedOptim, StepsEqualUnshardedBitwise) {
  auto c = dist::world();
  std::vector<NamedTensor> full, local;
  std::map<std::string, ShardSpec> specs;
  std::vector<ShardBox> boxes;
  for (size_t i = 0; i < kBlockParams.size(); ++i) {
    const ParamDef& d = kBlockParams[i];
    const Tensor f = pattern(i, -1, d.shape);
    boxes.push_back(grid_box(d.shape, c->size(), c->rank()));
    full.emplace_back(d.fqn, f);
    local.emplace_back(d.fqn, block_of(f, boxes.back()));
    specs[d.fqn] = ShardSpec{d.shape, boxes.back().offsets, c};
  }
  OptimizerOptions o;
  o.default_algorithm = Algorithm::muon;
  o.groups.push_back({"adamw", {"x.*"}, Algorithm::adamw, 1.0, std::nullopt});
  Optimizer ref(full, o), opt(local, o, specs);
  for (size_t i = 0; i < kBlockParams.size(); ++i) {
    ASSERT_EQ(opt.entries()[i].shard_boxes.size(), static_cast<size_t>(c->size()));
    for (int r = 0; r < c->size(); ++r) {
      const ShardBox want = grid_box(kBlockParams[i].shape, c->size(), r);
      EXPECT_EQ(opt.entries()[i].shard_boxes[static_cast<size_t>(r)].offsets, want.offsets);
      EXPECT_EQ(opt.entries()[i].shard_boxes[static_cast<size_t>(r)].sizes, want.sizes);
    }
  }
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < kBlockParams.size(); ++i) {
      const Tensor g = pattern(i, step, kBlockParams[i].shape);
      full[i].second.set_grad(g);
      local[i].second.set_grad(block_of(g, boxes[i]));
    }
    ref.step(0.02);
    opt.step(0.02);
    for (size_t i = 0; i < kBlockParams.size(); ++i) {
      const Tensor got = gather_blocks(local[i].second, kBlockParams[i].shape, *c);
      const Tensor& want = full[i].second;
      ASSERT_EQ(got.shape(), want.shape());
      EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), want.nbytes()), 0)
          << kBlockParams[i].fqn << " after step " << step + 1
          << ": gathered blocks differ from the unsharded step";
    }
  }
}

// Expects ValueError containing each of `wants` from constructing an optimizer over `params` with
// `specs` (collective: every rank calls it once).
void expect_spec_error(const std::vector<NamedTensor>& params,
                       const std::map<std::string, ShardSpec>& specs,
                       const std::vector<std::string>& wants) {
  try {
    Optimizer(params, {}, specs);
    ADD_FAILURE() << "accepted; wanted: " << wants[0];
  } catch (const ValueError& e) {
    for (const auto& want : wants)
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

std::string box_text(const std::vector<int64_t>& offsets, const Shape& sizes) {
  return "[" + std::to_string(offsets[0]) + ":" + std::to_string(offsets[0] + sizes[0]) + ", " +
         std::to_string(offsets[1]) + ":" + std::to_string(offsets[1] + sizes[1]) + "]";
}

TEST(BlockShardedOptim, BoxesThatDoNotTileThrowOnEveryRank) {
  auto c = dist::world();
  const int w = c->size(), me = c->rank();
  const std::string ws = std::to_string(w);
  // Rank r holds column r of a [7, w + 1] tensor: the last column is on no rank.
  expect_spec_error({{"h.weight", pattern(0, -1, {7, 1})}},
                    {{"h.weight", ShardSpec{{7, w + 1}, {0, me}, c}}},
                    {"[optim] h.weight: the boxes (rank 0 [0:7, 0:1]",
                     ") cover " + std::to_string(7 * w) + " of the " + std::to_string(7 * (w + 1)) +
                         " elements of global shape [7, " + std::to_string(w + 1) + "]"});
  // Every rank holds column 0 of a [7, w] tensor: the volumes add up, but the boxes overlap.
  const std::vector<NamedTensor> col = {{"o.weight", pattern(1, -1, {7, 1})}};
  const std::map<std::string, ShardSpec> same = {{"o.weight", ShardSpec{{7, w}, {0, 0}, c}}};
  if (w == 1) {
    EXPECT_NO_THROW(Optimizer(col, {}, same));
  } else {
    expect_spec_error(col, same,
                      {"[optim] o.weight: the boxes of ranks 0 ([0:7, 0:1]) and 1 ([0:7, 0:1]) "
                       "overlap in global shape [7, " +
                       ws + "]"});
  }
  // The last rank's box sticks out of the tensor: it names the box, the others the parameter.
  const ShardBox b = grid_box({7, 10}, w, me);
  std::vector<int64_t> off = b.offsets;
  if (me == w - 1) off[1] += 1;
  expect_spec_error(
      {{"m.weight", pattern(2, -1, b.sizes)}}, {{"m.weight", ShardSpec{{7, 10}, off, c}}},
      me == w - 1 ? std::vector<std::string>{"[optim] m.weight: local shard",
                                             "at box " + box_text(off, b.sizes) +
                                                 " falls outside global shape [7, 10]"}
                  : std::vector<std::string>{"[optim] rank " + std::to_string(w - 1) +
                                             " of the shard group rejected its shard "
                                             "spec #0 (m.weight here)"});
  // Offsets that do not match the global shape's dims.
  expect_spec_error({{"m.weight", pattern(2, -1, b.sizes)}},
                    {{"m.weight", ShardSpec{{7, 10}, {b.offsets[0]}, c}}},
                    {"[optim] m.weight: 1 box offsets for global shape [7, 10]"});
}

}  // namespace
}  // namespace hp::optim
