// Fused programs against the unfused eager ops: bitwise where the fused program runs the same
// functors in the same order (chains, broadcasts, casts, select, row reductions), within the ULP
// bounds of tests/kernels/elementwise_kernel_test.cpp where it reassociates or composes (hand
// kernels: silu, gelu-tanh, softmax, rms_norm). Every test runs on every ISA this CPU has.
#include "fusion_helpers.h"
#include "isa_test.h"

namespace hp::fusion {
namespace {

using namespace testing;
using V = std::vector<Var>;

// Fused and eager results of fn on xs, compared bitwise (the generic passes: stencils off).
void check_bitwise(const TraceFn& fn, const std::vector<Tensor>& xs, const std::string& what) {
  Fused f = fuse(fn, what, /*patterns=*/false);
  ASSERT_NE(f.plan(xs), nullptr) << what << " should fuse";
  Graph g;
  trace(fn, xs, &g);
  expect_all_bitwise(f(xs), run_eager(g, xs), what);
}

V chain(const V& x) {
  Var a = x[0];
  Var y = exp(a * 0.5) - tanh(a) / (1.0 + abs(a)) + relu(a) * sigmoid(a);
  y = maximum(y, a * -2.0) + minimum(sqrt(abs(a)), rsqrt(square(a) + 1.0));
  return {pow(y, 3.0) + clamp(log(abs(y) + 1e-3), -2.0, 2.0) + reciprocal(y * y + 1.0)};
}

// Each test runs once per ISA, with that ISA active (isa_test.h).
class FusionEqualsEagerIsa : public ::hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(FusionEqualsEagerIsa);

TEST_P(FusionEqualsEagerIsa, ElementwiseChainF32AndBf16) {
  for (DType dt : {DType::f32, DType::bf16}) {
    // Odd sizes: vector tails inside tiles and at the end.
    check_bitwise(chain, {randn_t({37, 129}, dt, 1)}, "chain " + dname(dt));
    check_bitwise(chain, {randn_t({100003}, dt, 2)}, "chain 1-d " + dname(dt));
  }
}

TEST_P(FusionEqualsEagerIsa, ChainEqualsHpOps) {
  // The eager reference itself against the public ops (same kernels, same order).
  Tensor x = randn_t({17, 300}, DType::f32, 3);
  Fused f = fuse([](const V& v) { return V{exp(v[0]) * sigmoid(v[0]) - tanh(v[0] + v[0])}; });
  expect_bitwise(f({x})[0], hp::sub(hp::mul(hp::exp(x), hp::sigmoid(x)), hp::tanh(hp::add(x, x))),
                 "exp*sigmoid - tanh(2x)");
}

TEST_P(FusionEqualsEagerIsa, Broadcasts) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string d = dname(dt);
    // [M, N] with a row [N], a column [M, 1], a one-element tensor and literals.
    Tensor x = randn_t({6, 130}, dt, 4), w = randn_t({130}, dt, 5), c = randn_t({6, 1}, dt, 6);
    Tensor s = randn_t({}, dt, 7);
    check_bitwise([](const V& v) { return V{(v[0] + v[1]) * v[2] - v[3] * exp(v[1]) + 2.0}; },
                  {x, w, c, s}, "row/col/scalar " + d);
    // 3-d, the row as [1, 1, N], the column [2, 3, 1]; a row-only and a column-only result.
    Tensor x3 = randn_t({2, 3, 70}, dt, 8), w3 = randn_t({1, 1, 70}, dt, 9),
           c3 = randn_t({2, 3, 1}, dt, 10);
    check_bitwise(
        [](const V& v) {
          return V{v[0] * v[1] + v[2], sigmoid(v[2]) * v[0]};
        },
        {x3, w3, c3}, "3-d " + d);
    // Rows longer than a block: column blocks, the column value loaded per block.
    Tensor xl = randn_t({3, 40000}, dt, 26), wl = randn_t({40000}, dt, 27),
           cl = randn_t({3, 1}, dt, 28);
    check_bitwise([](const V& v) { return V{v[0] * v[1] + v[2]}; }, {xl, wl, cl}, "long rows " + d);
    // Row [N] times column [M, 1] makes the full [M, N].
    check_bitwise([](const V& v) { return V{v[0] * v[1]}; }, {w, c}, "outer product " + d);
  }
}

TEST_P(FusionEqualsEagerIsa, Casts) {
  Tensor xb = randn_t({33, 257}, DType::bf16, 11), yf = randn_t({33, 257}, DType::f32, 12);
  // bf16 -> f32 math -> bf16; bf16 math (rounded at every node); mixed operands promote to f32.
  check_bitwise([](const V& v) { return V{cast(exp(cast(v[0], DType::f32)) * v[1], DType::bf16)}; },
                {xb, yf}, "upcast math downcast");
  check_bitwise(
      [](const V& v) {
        return V{exp(v[0]) * v[0] + 1.0, v[0] * v[1]};
      },
      {xb, yf}, "bf16 chain + mixed");
  check_bitwise(
      [](const V& v) {
        return V{cast(v[0], DType::bf16), cast(v[1], DType::f32)};
      },
      {yf, xb}, "casts as outputs");
  // One chain reading three bf16 inputs (each widened into its own slot while the chain is open).
  Tensor zb = randn_t({33, 257}, DType::bf16, 24), wb = randn_t({33, 257}, DType::bf16, 25);
  check_bitwise(
      [](const V& v) {
        Var a = cast(v[0], DType::f32), b = cast(v[1], DType::f32), c = cast(v[2], DType::f32);
        return V{((exp(a) + b) * 2.0 - c) / (a * a + 1.0)};
      },
      {xb, zb, wb}, "chain over bf16 inputs");
}

TEST_P(FusionEqualsEagerIsa, Select) {
  Tensor x = randn_t({19, 211}, DType::f32, 13), y = randn_t({19, 211}, DType::f32, 14);
  // Leaky ReLU as where(x > 0, x, 0.01 x): against the public ops too.
  Fused leaky = fuse([](const V& v) { return V{where(gt(v[0], v[0] * 0.0), v[0], v[0] * 0.01)}; });
  Tensor want = hp::where(
      hp::kernels::elementwise(kernels::EwOp::gt_mask, x, zeros({}), DType::f32).to(DType::boolean),
      x, hp::kernels::elementwise(kernels::EwOp::mul, x, full({}, 0.01f), DType::f32));
  expect_bitwise(leaky({x})[0], want, "leaky relu vs hp::where");
  // Scalar and column branches.
  Tensor c = randn_t({19, 1}, DType::f32, 15);
  check_bitwise([](const V& v) { return V{where(lt(v[0], v[1]), v[2], 3.0 + v[0] * 0.0)}; },
                {x, y, c}, "select col/scalar");
}

V softmax_fn(const V& x) {
  Var e = exp(x[0] - amax(x[0]));
  return {e / sum(e)};
}

V rms_norm_fn(const V& v) {
  Var x = v[0];
  return {x * rsqrt(mean(x * x) + 1e-6) * v[1]};
}

TEST_P(FusionEqualsEagerIsa, RowReductions) {
  // Rows shorter than a tile, of several tiles, and with a ragged tail.
  for (const Shape& s :
       {Shape{5, 7}, Shape{64, 1000}, Shape{3, 5000}, Shape{2, 2, 4097}, Shape{1, 20000}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      const std::string d = shape_str(s) + " " + dname(dt);
      Tensor x = randn_t(s, dt, 16, 3.0), w = randn_t({s.back()}, dt, 17);
      check_bitwise(softmax_fn, {x}, "softmax " + d);
      check_bitwise(rms_norm_fn, {x, w}, "rms_norm " + d);
      check_bitwise(
          [](const V& v) {
            return V{amax(v[0]), mean(v[0]), sum(exp(v[0]))};
          },
          {x}, "row outputs " + d);
    }
  }
}

TEST_P(FusionEqualsEagerIsa, SoftmaxAndRmsNormMatchHandKernels) {
  Tensor x = randn_t({64, 1000}, DType::f32, 18, 3.0), w = randn_t({1000}, DType::f32, 19);
  Fused sm = fuse(softmax_fn, "softmax", /*patterns=*/false),
        rn = fuse(rms_norm_fn, "rms_norm", /*patterns=*/false);
  // Other summation orders and 1/s·e vs e/s: a few ulps (exp's 2 ulp + the sum's rounding).
  expect_ulp(sm({x})[0], hp::softmax(x, -1), 8, "softmax vs hp::softmax");
  expect_ulp(rn({x, w})[0], hp::rms_norm(x, w, 1e-6), 6, "rms_norm vs hp::rms_norm");
  // The structure: one read of the row from memory per block, the rest in cache.
  auto ps = sm.plan({x}), pr = rn.plan({x, w});
  EXPECT_EQ(ps->stages.size(), 3u);  // max | exp, sum (e kept in L2) | e / s
  EXPECT_EQ(pr->stages.size(), 2u);  // sum of squares | x · r · w
  EXPECT_EQ(pr->num_keeps, 0);
  EXPECT_LE(ps->rows_per_block * ps->N * 4 * (1 + ps->num_keeps), 256 << 10);
}

TEST_P(FusionEqualsEagerIsa, ComposedActivations) {
  Tensor x = randn_t({4097, 33}, DType::f32, 20, 3.0);
  // The composed forms as traced (patterns off: the canonicalization of simplify.h would run
  // the silu / gelu_tanh functors instead; tests/fusion/simplify_test.cpp holds those).
  Fused silu_c = fuse([](const V& v) { return V{v[0] * sigmoid(v[0])}; }, "silu", false);
  Tensor y = silu_c({x})[0];
  expect_bitwise(y, hp::mul(x, hp::sigmoid(x)), "x*sigmoid(x) vs eager ops");
  expect_ulp(y, hp::silu(x), 5, "x*sigmoid(x) vs silu kernel");
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Fused gelu_c = fuse(
      [](const V& v) {
        Var a = v[0];
        return V{0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))};
      },
      "gelu_tanh", false);
  Tensor g = gelu_c({x})[0];
  Graph gr;
  trace(
      [](const V& v) {
        Var a = v[0];
        return V{0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))};
      },
      {x}, &gr);
  expect_bitwise(g, run_eager(gr, {x})[0], "composed gelu vs eager ops");
  // tanh's 4 ulp of 1 become absolute error where 1 + tanh(u) cancels (x << 0), times 0.5|x|.
  expect_ulp(g, hp::gelu(x, "tanh"), 8, "composed gelu vs gelu_tanh kernel", x, 5e-7);
}

TEST_P(FusionEqualsEagerIsa, ChainStoresValuesReadElsewhere) {
  // t is read by the chain's next op, again as its source two ops later, and is an output: the
  // chain stores it as it passes (tails included: 4773 elements).
  auto fn = [](const V& v) {
    Var t = exp(v[0] * 0.5);
    Var b = (t + 1.0) * t;
    return V{b - v[0], t};
  };
  for (const Shape& s : {Shape{37, 129}, Shape{5}}) {
    Tensor x = randn_t(s, DType::f32, 29);
    Fused f = fuse(fn);
    const std::string d = describe(*f.plan({x}));
    EXPECT_NE(d.find("store"), std::string::npos) << d;
    check_bitwise(fn, {x}, "chain with stores " + shape_str(s));
  }
}

// bf16 chains read bf16 inputs and write bf16 outputs in memory (routines.h ChainOp::bf16): a
// value that is an output twice and also read by a later step outside the chain (select), an
// input read both by a chain and by a select, a row-broadcast bf16 input as a chain source, a
// backward helper inside the chain; tails and a 1-element tensor.
TEST_P(FusionEqualsEagerIsa, Bf16ChainsWithMemoryOperands) {
  auto fn = [](const V& v) {
    Var t = tanh(v[0] * v[1]);  // [M, N] · row [N]
    Var b = ew_binary(kernels::EwOp::silu_bwd, v[0], t * 2.0) - v[1];
    Var s = where(gt(t, v[0]), t, b);
    return V{t, b * b, s, t};
  };
  for (const Shape& rows : {Shape{37, 129}, Shape{1, 1}, Shape{3, 1031}}) {
    const Tensor x = randn_t(rows, DType::bf16, 30), w = randn_t({rows.back()}, DType::bf16, 31);
    const std::string d = describe(*fuse(fn).plan({x, w}));
    EXPECT_NE(d.find("store_bf16 out"), std::string::npos) << d;
    EXPECT_NE(d.find("load_bf16 in"), std::string::npos) << d;
    check_bitwise(fn, {x, w}, "bf16 chains with memory operands " + shape_str(rows));
  }
}

// A chain whose every memory operand is bf16 runs its groups as pairs of vectors in the unpack
// order of the eager bf16 kernels, and stores a rounded value by its top halves (routines_impl.h
// chain_pairs): every chain form (load, unary, acc_v, v_acc, acc_s, s_acc, stores mid-chain and at
// the end) on special values — NaNs (quiet and signalling, both signs, payloads), ±Inf, ±0, bf16
// subnormals, the largest bf16 (whose doubling overflows) — beside random values whose products
// round at ties; lengths with group tails and a vector tail; 1 and 2 threads.
TEST_P(FusionEqualsEagerIsa, Bf16PairChainsSpecialValues) {
  auto fn = [](const V& v) {
    const Var s = silu(v[0]);
    const Var y = s * v[1];             // acc_v, stored and continued
    const Var z = v[0] - y * 2.0;       // acc_s, then v_acc
    return V{y, s, 3.0 - tanh(z) * v[1]};  // s_acc at the end
  };
  const uint16_t special[] = {0x7FC0, 0xFFC1, 0x7F81, 0xFF80, 0x7F80, 0x0000, 0x8000,
                              0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x3F81, 0xC2B2, 0x42B2};
  for (int64_t n : {int64_t{100003}, int64_t{1000}, int64_t{77}}) {
    SCOPED_TRACE(n);
    Tensor g = randn_t({n}, DType::bf16, 40, 4.0), u = randn_t({n}, DType::bf16, 41);
    uint16_t* pg = static_cast<uint16_t*>(g.raw_data());
    uint16_t* pu = static_cast<uint16_t*>(u.raw_data());
    for (int64_t i = 0; i < n; i += 5) {
      const uint16_t b = special[static_cast<size_t>(i / 5) % std::size(special)];
      (i % 2 ? pg : pu)[i] = b;
    }
    Fused f = fuse(fn, "pairs", /*patterns=*/false);
    const std::string d = describe(*f.plan({g, u}));
    EXPECT_NE(d.find("chain - [load_bf16 in0"), std::string::npos) << d;
    check_bitwise(fn, {g, u}, "bf16 pairs chain");
    const int saved = num_threads();
    set_num_threads(1);
    const std::vector<Tensor> one = f({g, u});
    set_num_threads(2);
    const std::vector<Tensor> two = f({g, u});
    set_num_threads(saved);
    expect_all_bitwise(two, one, "bf16 pairs chain, 2 threads vs 1");
  }
}

// A pass of one step and no L1 slot streams memory to memory and takes the block's row in one call
// (compile.cpp); a pass with slots keeps its L1 tile. Both equal the eager ops bitwise, across
// blocks and at the ragged end, and a one-step row reduction over a whole row equals the eager one.
TEST_P(FusionEqualsEagerIsa, OneStepPassesTakeTheBlockRow) {
  auto one = [](const V& v) { return V{exp(v[0])}; };
  auto two = [](const V& v) { return V{exp(v[0]) + tanh(v[0] * v[0]), v[0] * 3.0}; };
  auto rowmax = [](const V& v) { return V{amax(v[0])}; };
  const Tensor x = randn_t({100003}, DType::f32, 50);
  const std::string d1 = describe(*fuse(one).plan({x}));
  EXPECT_NE(d1.find("pass (tile 16384)"), std::string::npos) << d1;
  check_bitwise(one, {x}, "one-step pass");
  const std::string d2 = describe(*fuse(two).plan({x}));
  EXPECT_NE(d2.find("pass (tile 1024)"), std::string::npos) << d2;
  check_bitwise(two, {x}, "pass with slots");
  const Tensor r = randn_t({3, 40001}, DType::f32, 51);
  const std::string d3 = describe(*fuse(rowmax).plan({r}));
  EXPECT_NE(d3.find("pass (tile 40064)"), std::string::npos) << d3;
  check_bitwise(rowmax, {r}, "one-step row reduction");
}

TEST_P(FusionEqualsEagerIsa, SplitOnStreamBudget) {
  // 30 values live at once exceed kMaxStreams: the cluster splits, the live values are kept.
  auto fn = [](const V& v) {
    std::vector<Var> t;
    for (int k = 0; k < 30; ++k) t.push_back(exp(v[0] * (0.01 * (k + 1))));
    Var acc = t[0];
    for (int k = 1; k < 30; ++k)
      acc = acc + t[static_cast<size_t>(k)] * t[static_cast<size_t>(29 - k)];
    return V{acc};
  };
  Tensor x = randn_t({9, 3001}, DType::f32, 21);
  Fused f = fuse(fn);
  auto p = f.plan({x});
  ASSERT_NE(p, nullptr);
  EXPECT_GT(p->num_passes, 1);
  EXPECT_GT(p->num_keeps, 0);
  check_bitwise(fn, {x}, "split chain");
}

TEST(FusionEqualsEager, ThreadCountIndependent) {
  const int saved = num_threads();
  Tensor x = randn_t({257, 3001}, DType::f32, 22), w = randn_t({3001}, DType::f32, 23);
  // The generic programs (the stencils are the hand kernels, tested in stencil_test.cpp).
  Fused sm = fuse(softmax_fn, "softmax", false), rn = fuse(rms_norm_fn, "rms_norm", false),
        ch = fuse(chain);
  set_num_threads(1);
  auto a = sm({x}), b = rn({x, w}), c = ch({x});
  set_num_threads(2);
  expect_bitwise(sm({x})[0], a[0], "softmax 1 vs 2 threads");
  expect_bitwise(rn({x, w})[0], b[0], "rms_norm 1 vs 2 threads");
  expect_bitwise(ch({x})[0], c[0], "chain 1 vs 2 threads");
  set_num_threads(saved);
}

}  // namespace
}  // namespace hp::fusion
