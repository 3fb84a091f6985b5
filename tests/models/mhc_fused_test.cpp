// MegaMHC (ops/mhc_fused.h) against the composed mHC ops it replaced (HyperConnection::
// mix_composed / fold_composed): one full block — mix with the adjacent RMSNorm, a block output
// that depends on the normed input, and the fold — forward and every gradient (streams, fn, base,
// scale, norm weight), f32 and bf16, hc_mult 2 and 4, several hidden sizes; bitwise independent of
// the thread count; and the shape errors.
//
// Stated bounds (max |fused − reference| / max |reference| per tensor; the reference is the
// composed ops in f32 on the same, bf16-representable, inputs): f32 1e-5 forward, 1e-4 gradients
// (the fused GEMM scales x · fnᵀ by the rms instead of normalizing x first, and sums in another
// order); bf16 2e-2 forward and gradients, a few bf16 ulps (2^-8 each) — the fused passes compute
// in f32 and round once, so they land closer to the f32 reference than the composed bf16 ops (which
// round after every op: up to 0.1 on d scale at N=2, D=96).
#include "hp/ops/mhc_fused.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/models/mhc.h"
#include "hp/ops/ops.h"
#include "models/compare.h"

namespace hp::models {
namespace {

using testing::rel_diff;

struct BlockRun {
  std::vector<Tensor> outs;   // post, comb, input, new streams
  std::vector<Tensor> grads;  // streams, fn, base, scale, norm weight
};

// One mHC block on random streams [2, 5, n, d]: new = fold(mix(streams), input · c, streams),
// loss Σ new · g; the parameters drawn away from their init (base ≠ 0, scale ≠ 1).
// With wrap_norm the norm gets an (identity) forward wrapper, so the fused mix runs without it and
// the norm after it.
BlockRun run_block(bool fused, DType dt, int64_t n, int64_t d, int64_t iters,
                   bool wrap_norm = false) {
  manual_seed(11 + uint64_t(n * 100 + d));
  HyperConnection hc(n, d, iters, 1e-6, 1e-6, dt, 0.02);
  nn::RMSNorm norm(d, 1e-6, dt);
  if (wrap_norm)
    norm.set_forward_wrapper(
        [](const Tensor& x, const nn::Module::ForwardFn& inner) { return inner(x); });
  hc.fn.copy_from(mul(randn(hc.fn.shape()), 0.5));
  hc.base.copy_from(mul(randn(hc.base.shape()), 0.5));
  hc.scale.copy_from(from_vector({0.7, 1.3, 2.0}, {3}));
  // Data drawn bf16-representable, so an f32 run is the exact-input reference of a bf16 one.
  auto draw = [dt](const Shape& s) { return randn(s).to(DType::bf16).to(dt); };
  norm.weight.copy_from(add(mul(draw({d}), 0.3), 1.0).to(DType::bf16).to(dt));
  Tensor streams = draw({2, 5, n, d}).requires_grad_();
  const Tensor c = draw({2, 5, d});
  const Tensor g = draw({2, 5, n, d});
  const HcMix m = fused ? hc.mix(streams, norm) : hc.mix_composed(streams, norm);
  const Tensor out = mul(m.input, c);
  const Tensor y = fused ? HyperConnection::fold(m, out, streams)
                         : HyperConnection::fold_composed(m, out, streams);
  sum(cast(mul(y, g), DType::f32)).backward();
  BlockRun r;
  r.outs = {m.post, m.comb, m.input, y};
  for (const Tensor& t : {streams, hc.fn, hc.base, hc.scale, norm.weight})
    r.grads.push_back(t.grad());
  return r;
}

const char* kOut[] = {"post", "comb", "input", "new streams"};
const char* kGrad[] = {"d streams", "d fn", "d base", "d scale", "d norm weight"};

TEST(MegaMHC, FusedEqualsComposedF32AndBf16) {
  for (int64_t n : {2, 4})
    for (int64_t d : {8, 40, 96}) {
      const std::string what = "N=" + std::to_string(n) + " D=" + std::to_string(d);
      const BlockRun f = run_block(true, DType::f32, n, d, 20);
      const BlockRun c = run_block(false, DType::f32, n, d, 20);
      const BlockRun fb = run_block(true, DType::bf16, n, d, 20);
      const BlockRun cb = run_block(false, DType::bf16, n, d, 20);
      for (size_t i = 0; i < f.outs.size(); ++i) {
        ASSERT_EQ(f.outs[i].dtype(), c.outs[i].dtype()) << what << " " << kOut[i];
        ASSERT_EQ(fb.outs[i].dtype(), cb.outs[i].dtype()) << what << " " << kOut[i];
        EXPECT_LE(rel_diff(f.outs[i], c.outs[i]), 1e-5) << what << " f32 " << kOut[i];
        // bf16: against the f32 composed run on the same inputs (the composed bf16 ops, which
        // round after every op, are printed on failure for comparison).
        const double ef = rel_diff(fb.outs[i], c.outs[i]), ec = rel_diff(cb.outs[i], c.outs[i]);
        EXPECT_LE(ef, 2e-2) << what << " bf16 " << kOut[i] << ", composed bf16: " << ec;
      }
      for (size_t i = 0; i < f.grads.size(); ++i) {
        ASSERT_TRUE(f.grads[i].defined() && c.grads[i].defined()) << what << " " << kGrad[i];
        EXPECT_LE(rel_diff(f.grads[i], c.grads[i]), 1e-4) << what << " f32 " << kGrad[i];
        const double ef = rel_diff(fb.grads[i], c.grads[i]), ec = rel_diff(cb.grads[i], c.grads[i]);
        EXPECT_LE(ef, 2e-2) << what << " bf16 " << kGrad[i] << ", composed bf16: " << ec;
      }
    }
}

TEST(MegaMHC, SinkhornIterationCountsMatch) {
  // iters 0 and 1 (a single column step), 3 (alternating rounds): the backward walks them all.
  for (int64_t iters : {0, 1, 3}) {
    const BlockRun f = run_block(true, DType::f32, 4, 16, iters);
    const BlockRun c = run_block(false, DType::f32, 4, 16, iters);
    EXPECT_LE(rel_diff(f.outs[1], c.outs[1]), 1e-5) << "comb, iters " << iters;
    for (size_t i = 0; i < f.grads.size(); ++i)
      EXPECT_LE(rel_diff(f.grads[i], c.grads[i]), 1e-4) << kGrad[i] << ", iters " << iters;
  }
}

TEST(MegaMHC, AWrappedNormRunsAfterTheFusedCollapse) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const BlockRun f = run_block(true, dt, 4, 24, 20, true);
    const BlockRun c = run_block(false, DType::f32, 4, 24, 20);
    const double tol = dt == DType::f32 ? 1e-4 : 2e-2;
    for (size_t i = 0; i < f.outs.size(); ++i)
      EXPECT_LE(rel_diff(f.outs[i], c.outs[i]), tol) << kOut[i];
    for (size_t i = 0; i < f.grads.size(); ++i)
      EXPECT_LE(rel_diff(f.grads[i], c.grads[i]), tol) << kGrad[i];
  }
}

TEST(MegaMHC, CombIsDoublyStochastic) {
  const BlockRun f = run_block(true, DType::f32, 4, 32, 20);
  const auto comb = f.outs[1].to_vector();  // [10 rows, 4, 4]
  for (size_t r = 0; r < 10; ++r)
    for (size_t a = 0; a < 4; ++a) {
      double row = 0, col = 0;
      for (size_t b = 0; b < 4; ++b) {
        row += comb[r * 16 + a * 4 + b];
        col += comb[r * 16 + b * 4 + a];
      }
      EXPECT_NEAR(row, 1.0, 5e-2);  // 20 rounds leave peaked rows slightly off
      EXPECT_NEAR(col, 1.0, 1e-5);  // the last step normalizes columns
    }
}

TEST(MegaMHC, ThreadCountDoesNotChangeBits) {
  const int saved = num_threads();
  std::vector<BlockRun> runs;
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    runs.push_back(run_block(true, DType::bf16, 4, 64, 20));
    runs.push_back(run_block(true, DType::f32, 4, 64, 20));
  }
  set_num_threads(saved);
  for (size_t k = 0; k < 2; ++k) {
    for (size_t i = 0; i < runs[k].outs.size(); ++i)
      EXPECT_EQ(runs[k].outs[i].to_vector(), runs[k + 2].outs[i].to_vector()) << kOut[i];
    for (size_t i = 0; i < runs[k].grads.size(); ++i)
      EXPECT_EQ(runs[k].grads[i].to_vector(), runs[k + 2].grads[i].to_vector()) << kGrad[i];
  }
}

TEST(MegaMHC, BadShapesNameTheTensor) {
  const MhcSpec s{4, 20, 1e-6, 1e-6, 1e-6};
  const Tensor x = randn({1, 2, 4, 8});
  const Tensor fn = randn({24, 32}), base = zeros({24}), scale = ones({3});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              fused_mhc_mix(randn({1, 2, 3, 8}), fn, base, scale, Tensor(), s);
            }).find("[mhc] streams must be [B, T, 4, hidden]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              fused_mhc_mix(x, randn({24, 31}), base, scale, Tensor(), s);
            }).find("fn must be [24, 32]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              fused_mhc_mix(x, fn, base, scale, ones({7}), s);
            }).find("norm weight must be [8]"),
            std::string::npos);
  const FusedMix m = fused_mhc_mix(x, fn, base, scale, Tensor(), s);
  EXPECT_NE(message([&] {
              fused_mhc_fold(m.post, m.comb, randn({1, 2, 9}), x);
            }).find("[mhc] fold: post"),
            std::string::npos);
}

}  // namespace
}  // namespace hp::models
