// The fusion modes in the models (fusion/mode.h, fusion/patterns.h): each pattern against the
// eager ops it replaces, forward and backward; the saved inputs going through the saved-tensor
// hooks; and training runs with fusion off, auto and lazy (docs/FUSION.md "Modes").
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "expect_close.h"
#include "fusion/fusion_helpers.h"
#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/fusion/mode.h"
#include "hp/fusion/patterns.h"
#include "hp/train/config.h"
#include "isa_test.h"
#include "train/corpus.h"
#include "train/train_run.h"

namespace hp::fusion::testing {
namespace {

// Outputs, then the gradients of sum(y_k · r_k) (r fixed random weights) w.r.t. every input.
std::vector<Tensor> run_with_grads(
    const std::function<std::vector<Tensor>(std::vector<Tensor>&)>& f,
    const std::vector<Tensor>& inputs) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone();
    c.requires_grad_();
    xs.push_back(c);
  }
  std::vector<Tensor> ys = f(xs);
  Tensor loss;
  for (size_t k = 0; k < ys.size(); ++k) {
    Tensor term = hp::sum(hp::mul(ys[k], randn_t(ys[k].shape(), ys[k].dtype(), 100 + k)));
    loss = loss.defined() ? hp::add(loss, term) : term;
  }
  loss.backward();
  std::vector<Tensor> out;
  for (const Tensor& y : ys) out.push_back(y.detach());
  for (const Tensor& x : xs) out.push_back(x.grad());
  return out;
}

TEST(FusionMode, ParseSetAndScope) {
  EXPECT_EQ(parse_mode("lazy", "k"), Mode::lazy);
  EXPECT_EQ(parse_mode("auto", "k"), Mode::auto_);
  EXPECT_EQ(parse_mode("none", "k"), Mode::none);
  try {
    parse_mode("fast", "training.fusion");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("training.fusion = 'fast'"), std::string::npos)
        << e.what();
  }
  const Mode before = mode();
  {
    const ModeScope s(Mode::lazy);
    EXPECT_EQ(mode(), Mode::lazy);
    {
      const ModeScope t(Mode::none);
      EXPECT_EQ(mode(), Mode::none);
    }
    EXPECT_EQ(mode(), Mode::lazy);
  }
  EXPECT_EQ(mode(), before);
}

TEST(FusionMode, BadConfigValueNamesKeyAndValue) {
  try {
    train::parse_config("model:\n  arch: llama\ntraining:\n  fusion: fast\n", "bad.yaml");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("training.fusion"), std::string::npos) << m;
    EXPECT_NE(m.find("fast"), std::string::npos) << m;
  }
}

// SwiGLU's region is the eager graph: auto and lazy equal none bitwise, forward and backward.
TEST(FusionPatterns, SwigluBitwiseEqualsEagerForwardAndBackward) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dname(dt));
    const Tensor g = randn_t({3, 37, 301}, dt, 1, 3.0), u = randn_t({3, 37, 301}, dt, 2);
    auto f = [](std::vector<Tensor>& x) { return std::vector<Tensor>{swiglu(x[0], x[1])}; };
    std::vector<Tensor> ref;
    {
      const ModeScope none(Mode::none);
      ref = run_with_grads(f, {g, u});
    }
    for (Mode m : {Mode::auto_, Mode::lazy}) {
      const ModeScope s(m);
      const int64_t before = pattern_calls().swiglu;
      expect_all_bitwise(run_with_grads(f, {g, u}), ref, mode_name(m));
      autograd::NoGradGuard no_grad;  // the forward-only region
      expect_bitwise(swiglu(g, u), ref[0], std::string(mode_name(m)) + " without grad");
      // lazy fuses both calls; auto both in f32 (with and without gradients), none in bf16.
      const int64_t fused = m == Mode::lazy || dt == DType::f32 ? 2 : 0;
      EXPECT_EQ(pattern_calls().swiglu - before, fused) << mode_name(m);
    }
  }
}

// RMSNorm·w and residual add + RMSNorm·w (lazy) against hp::add + the hand rms_norm kernel:
// bitwise, since lazy's regions match the stencils (fusion/stencils.h), which run those kernels.
TEST(FusionPatterns, RmsNormAndAddRmsNormMatchHandKernels) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dname(dt));
    const Tensor x = randn_t({2, 45, 259}, dt, 3), r = randn_t({2, 45, 259}, dt, 4);
    const Tensor w = randn_t({259}, dt, 5);
    auto norm = [](std::vector<Tensor>& t) {
      return std::vector<Tensor>{fusion::rms_norm(t[0], t[1], 1e-5)};
    };
    auto add_norm = [](std::vector<Tensor>& t) {
      auto [h, y] = add_rms_norm(t[0], t[1], t[2], 1e-5);
      return std::vector<Tensor>{h, y};
    };
    std::vector<Tensor> ref_n, ref_an, got_n, got_an;
    {
      const ModeScope none(Mode::none);
      ref_n = run_with_grads(norm, {x, w});
      ref_an = run_with_grads(add_norm, {x, r, w});
      // auto leaves the norms to the hand kernel: bitwise none.
      const ModeScope a(Mode::auto_);
      expect_all_bitwise(run_with_grads(norm, {x, w}), ref_n, "auto rms_norm");
      expect_all_bitwise(run_with_grads(add_norm, {x, r, w}), ref_an, "auto add_rms_norm");
    }
    {
      const ModeScope lazy(Mode::lazy);
      got_n = run_with_grads(norm, {x, w});
      got_an = run_with_grads(add_norm, {x, r, w});
    }
    expect_all_bitwise(got_n, ref_n, "lazy rms_norm (y, dx, dw)");
    expect_all_bitwise(got_an, ref_an, "lazy add_rms_norm (h, y, dx, dr, dw)");
  }
}

// Each test runs once per ISA, with that ISA active (isa_test.h).
class FusionPatternsIsa : public ::hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(FusionPatternsIsa);

// round_bf16 in registers (routines_impl.h) against the eager f32 -> bf16 -> f32 converters,
// bitwise: ties to even both ways, NaNs (quieted, payload's top bits kept), infinities, the
// largest finite values (rounding up to inf), denormals, and a ragged tail.
TEST_P(FusionPatternsIsa, RoundBf16MatchesEagerConverters) {
  std::vector<float> v;
  const uint32_t bits[] = {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F808001u, 0xBF808000u,
                           0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00001u,
                           0x7F800001u, 0xFFA12345u, 0x00008000u, 0x00018000u, 0x80000001u,
                           0x00000000u, 0x80000000u, 0x3F7FFFFFu, 0x477FFF80u};
  for (uint32_t b : bits) {
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  const Tensor r = randn_t({1000}, DType::f32, 9, 100.0);
  for (double x : r.to_vector()) v.push_back(static_cast<float>(x));
  const Tensor x = from_data<float>(v, {static_cast<int64_t>(v.size())});
  const Fused f = fuse([](const std::vector<Var>& a) {
    return std::vector<Var>{cast(cast(a[0], DType::bf16), DType::f32) * 1.0};
  });
  const Tensor want = x.to(DType::bf16).to(DType::f32);
  expect_bitwise(f({x})[0], want, "round_bf16");
}

// A bf16 region's ops run as one chain that rounds after each op in registers, not as one pass per
// op plus one per rounding (and still equal the eager ops bitwise: SwigluBitwise above).
TEST(FusionPatterns, Bf16OpsChain) {
  const Fused f =
      fuse([](const std::vector<Var>& v) { return std::vector<Var>{silu(v[0]) * v[1]}; });
  const Tensor g = randn_t({64, 300}, DType::bf16, 1), u = randn_t({64, 300}, DType::bf16, 2);
  const std::string d = describe(*f.plan({g, u}));
  EXPECT_NE(d.find("chain"), std::string::npos) << d;
  EXPECT_EQ(d.find("round"), std::string::npos) << d;
}

// The model's SwiGLU regions in bf16 read their bf16 inputs and write their bf16 outputs from the
// chains themselves (no widening / narrowing pass per tensor), the backward's silu_bwd joins the
// chain of dy·u, and all of it equals the eager ops bitwise, tails included (4099 elements).
TEST_P(FusionPatternsIsa, Bf16ChainsReadAndWriteMemory) {
  using V = std::vector<Var>;
  const Fused fwd = fuse([](const V& v) {
    const Var s = silu(v[0]);
    return V{s * v[1], s};
  });
  const Fused bwd = fuse([](const V& v) {
    const Var ds = v[3] * v[1];
    return V{ew_binary(kernels::EwOp::silu_bwd, v[0], ds), v[3] * v[2]};
  });
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dname(dt));
    const std::vector<Tensor> xs = {randn_t({4099}, dt, 1, 3.0), randn_t({4099}, dt, 2),
                                    randn_t({4099}, dt, 3), randn_t({4099}, dt, 4)};
    for (const Fused* f : {&fwd, &bwd}) {
      const std::vector<Tensor> in(xs.begin(), xs.begin() + (f == &fwd ? 2 : 4));
      const auto p = f->plan(in);
      ASSERT_NE(p, nullptr);
      const std::string d = describe(*p);
      EXPECT_EQ(p->num_slots, 0) << d;  // nothing staged in a tile: two chains at most
      EXPECT_EQ(d.find("load_bf16 slot"), std::string::npos) << d;
      EXPECT_EQ(d.find("    store_bf16"), std::string::npos) << d;
      EXPECT_NE(d.find(dt == DType::bf16 ? "store_bf16 out" : "chain out"), std::string::npos) << d;
      Graph g;
      trace(
          [&f, &fwd](const V& v) {
            if (f == &fwd) {
              const Var s = silu(v[0]);
              return V{s * v[1], s};
            }
            const Var ds = v[3] * v[1];
            return V{ew_binary(kernels::EwOp::silu_bwd, v[0], ds), v[3] * v[2]};
          },
          in, &g);
      expect_all_bitwise((*f)(in), run_eager(g, in), "swiglu region " + dname(dt));
    }
  }
}

// A fused region's saved inputs go through the active saved-tensor hooks, as every op's do (FSDP
// then saves a gathered weight as a reference to re-gather rather than keeping the gathered copy
// alive until backward; an offload moves saved activations).
TEST(FusionPatterns, SavedInputsGoThroughSavedTensorHooks) {
  const ModeScope lazy(Mode::lazy);
  Tensor x = randn_t({8, 64}, DType::f32, 6), w = randn_t({64}, DType::f32, 7);
  x.requires_grad_();
  w.requires_grad_();
  int packed = 0, unpacked = 0;
  autograd::SavedTensorHooks hooks;
  hooks.pack = [&packed](const Tensor& t) -> std::any {
    ++packed;
    return t.clone();  // a copy, as an offload would hold
  };
  hooks.unpack = [&unpacked](const std::any& a) -> Tensor {
    ++unpacked;
    return std::any_cast<Tensor>(a);
  };
  // lazy runs the RMSNorm stencil (fusion/stencils.h): the hand op's node, which saves x, w and
  // the per-row rstd; every one of them through the hooks, as the eager op's.
  int eager_packed = 0;
  {
    autograd::SavedTensorHooks count;
    count.pack = [&eager_packed](const Tensor& t) -> std::any { return ++eager_packed, t; };
    count.unpack = [](const std::any& a) -> Tensor { return std::any_cast<Tensor>(a); };
    const autograd::SavedTensorHooksGuard guard(count);
    (void)hp::rms_norm(x, w, 1e-6);
  }
  Tensor y;
  {
    const autograd::SavedTensorHooksGuard guard(hooks);
    y = fusion::rms_norm(x, w, 1e-6);
  }
  EXPECT_GE(packed, 2);  // x and w at least
  EXPECT_EQ(packed, eager_packed);
  hp::sum(y).backward();
  EXPECT_EQ(unpacked, packed);
  Tensor x2 = x.detach().clone(), w2 = w.detach().clone();
  x2.requires_grad_();
  w2.requires_grad_();
  hp::sum(fusion::rms_norm(x2, w2, 1e-6)).backward();
  expect_bitwise(x.grad(), x2.grad(), "dx with hooks");
  expect_bitwise(w.grad(), w2.grad(), "dw with hooks");
}

// ---------------------------------------------------------------- training

std::string corpus() {
  static const std::string path = hp::testing::corpus_prefix("hp_model_fusion_test", 120000);
  return path;
}

// A ~100k-parameter Llama (bf16 compute) whose MLP activations span several fused blocks.
train::Config tiny(const std::string& name, const std::string& fusion, const std::string& arch,
                   const std::string& precision) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("hp_model_fusion_" + name + "_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::string yaml = "model:\n  arch: " + arch + R"(
  hidden: 64
  layers: 2
  heads: 4
  kv_heads: 2
  intermediate: 256
)";
  if (arch == "qwen3_moe") yaml += "  experts: 4\n  experts_per_token: 2\n  moe_intermediate: 64\n";
  yaml += "data:\n  path: " + corpus() + R"(
optimizer:
  lr: 0.01
training:
  steps: 4
  batch_size: 4
  seq_len: 64
  seed: 3
  mixed_precision: )" +
          precision + R"(
  fusion: )" +
          fusion + R"(
metrics:
  log_every: 100
  progress: none
checkpoint:
  save_final: false
run:
  dir: )" +
          dir + "\n";
  return train::parse_config(yaml, "tiny.yaml");
}

std::vector<double> losses_of(const std::string& name, const std::string& fusion, int threads,
                              const std::string& arch = "llama",
                              const std::string& precision = "bf16") {
  const int before = num_threads();
  set_num_threads(threads);
  const std::vector<double> l =
      train::test::losses(train::test::quiet_train(tiny(name, fusion, arch, precision)));
  set_num_threads(before);
  return l;
}

TEST(FusionTraining, AutoAndLazyEqualNoneBitwise) {
  if (env_mode()) GTEST_SKIP() << "HP_FUSION is set: it overrides training.fusion";
  for (const std::string precision : {"bf16", "f32"}) {
    SCOPED_TRACE(precision);
    const PatternCalls c0 = pattern_calls();
    const std::vector<double> none = losses_of("none", "none", 2, "llama", precision);
    const PatternCalls c1 = pattern_calls();
    const std::vector<double> autom = losses_of("auto", "auto", 2, "llama", precision);
    const PatternCalls c2 = pattern_calls();
    const std::vector<double> lazy = losses_of("lazy", "lazy", 2, "llama", precision);
    const PatternCalls c3 = pattern_calls();
    ASSERT_EQ(none.size(), 4u);
    // What each mode fused: none nothing; auto SwiGLU in f32 only (measured faster, also while
    // training; bf16 compute stays eager); lazy also both norms.
    EXPECT_EQ(c1.swiglu + c1.rms_norm + c1.add_rms_norm, c0.swiglu + c0.rms_norm + c0.add_rms_norm);
    if (precision == "f32")
      EXPECT_GT(c2.swiglu, c1.swiglu);
    else
      EXPECT_EQ(c2.swiglu, c1.swiglu);
    EXPECT_EQ(c2.rms_norm, c1.rms_norm);
    EXPECT_EQ(c2.add_rms_norm, c1.add_rms_norm);
    EXPECT_GT(c3.swiglu, c2.swiglu);
    EXPECT_GT(c3.rms_norm, c2.rms_norm);
    EXPECT_GT(c3.add_rms_norm, c2.add_rms_norm);
    // auto: SwiGLU's regions are the eager ops (bitwise), the norms the hand kernels.
    EXPECT_EQ(autom, none);
    // lazy also fuses the norms, whose regions match the stencils (the hand kernels), and
    // SwiGLU's regions are the eager ops: bitwise none.
    EXPECT_EQ(lazy, none);
  }
}

TEST(FusionTraining, LazyBitwiseIdenticalForAnyThreadCount) {
  if (env_mode()) GTEST_SKIP() << "HP_FUSION is set: it overrides training.fusion";
  for (const std::string p : {"f32", "bf16"})
    EXPECT_EQ(losses_of("lazy_t1_" + p, "lazy", 1, "llama", p),
              losses_of("lazy_t2_" + p, "lazy", 2, "llama", p))
        << p;
}

TEST(FusionTraining, MoeLazyEqualsNoneBitwise) {
  if (env_mode()) GTEST_SKIP() << "HP_FUSION is set: it overrides training.fusion";
  const std::vector<double> none = losses_of("moe_none", "none", 2, "qwen3_moe", "f32");
  const std::vector<double> lazy = losses_of("moe_lazy", "lazy", 2, "qwen3_moe", "f32");
  ASSERT_EQ(none.size(), lazy.size());
  EXPECT_EQ(lazy, none);  // as the dense model: stencils + SwiGLU's eager-op regions
}

}  // namespace
}  // namespace hp::fusion::testing
