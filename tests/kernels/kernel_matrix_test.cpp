// The kernel matrix: every kernel family of the registry (kernels/registry.h) × every ISA
// (isa_test.h: one instance per ISA with it active; an ISA the CPU lacks is reported as skipped,
// with the reason) × each dtype the family takes, against an f64 reference computed here from the
// very inputs the kernel saw (bf16 / f16 inputs rounded first). Each test states its bound; a bound
// on a bf16 / f16 result adds one ulp of that dtype (the f32 result rounded once on store).
// The bounds are the families' documented accuracy, not their bitwise identity across ISAs (the
// family tests hold that).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/fusion/routines.h"
#include "hp/kernels/cpu/attention.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/gate_topk.h"
#include "hp/kernels/cpu/norm.h"
#include "hp/kernels/cpu/rope.h"
#include "hp/kernels/cpu/softmax.h"
#include "hp/kernels/registry.h"
#include "hp/mx/format.h"
#include "hp/mx/quantize.h"
#include "hp/optim/adamw.h"
#include "isa_test.h"

namespace hp {
namespace {

using kernels::EwOp;

class KernelMatrix : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(KernelMatrix);

constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

// n values uniform in [lo, hi), rounded to dt: what a kernel reading dt sees.
std::vector<double> inputs(int64_t n, uint32_t seed, double lo, double hi, DType dt) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return from_vector(v, {n}, dt).to_vector();
}

// The spacing of dt's values at magnitude |r| (its subnormal spacing below the normals).
double ulp_of(double r, DType dt) {
  const int digits = dt == DType::bf16 ? 8 : dt == DType::f16 ? 11 : 24;
  const int emin = dt == DType::f16 ? -14 : -126;
  const int e = r == 0 || !std::isfinite(r) ? emin : std::max(std::ilogb(r), emin);
  return std::ldexp(1.0, e - digits + 1);
}

// Every got[i] within bound(i) of ref[i] (NaN only where ref is NaN); prints the worst error as a
// fraction of the bound.
void expect_within(const std::vector<double>& got, const std::vector<double>& ref,
                   const std::function<double(size_t)>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " [" << i << "]";
      continue;
    }
    const double err = std::fabs(got[i] - ref[i]), b = bound(i);
    if (err == 0) continue;
    ASSERT_LE(err, b) << what << " [" << i << "] got " << got[i] << " ref " << ref[i];
    worst = std::max(worst, err / b);
  }
  std::printf("  %-44s worst %.3f of the bound\n", what.c_str(), worst);
}

// The store's rounding: one ulp of a narrow dtype at the reference (0 for f32).
double store_ulp(double ref, DType dt) {
  return dt == DType::f32 ? 0.0 : ulp_of(ref, dt);
}

std::string label(const char* family, DType dt) {
  return std::string(family) + " " + std::string(dtype_name(dt));
}

struct EwCase {
  EwOp op;
  double lo, hi;  // input range (binary ops: the first operand; the second is in [0.5, 4))
  double ulps;    // f32 bound in ulps of the result (simd_math.h's accuracy; 0.5: exact)
  std::function<double(double, double)> ref;
};

double sigmoid_ref(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Bound: f32 ulps·ulp(ref) + 2^-120 (underflowed transcendental results), plus the store's ulp.
TEST_P(KernelMatrix, ElementwiseUnaryAndBinary) {
  const std::vector<EwCase> cases = {
      {EwOp::add, -8, 8, 0.5, [](double x, double y) { return x + y; }},
      {EwOp::sub, -8, 8, 0.5, [](double x, double y) { return x - y; }},
      {EwOp::mul, -8, 8, 0.5, [](double x, double y) { return x * y; }},
      {EwOp::div, -8, 8, 0.5, [](double x, double y) { return x / y; }},
      {EwOp::exp, -8, 8, 2, [](double x, double) { return std::exp(x); }},
      {EwOp::log, 0.01, 100, 2, [](double x, double) { return std::log(x); }},
      {EwOp::tanh, -8, 8, 4, [](double x, double) { return std::tanh(x); }},
      {EwOp::sigmoid, -8, 8, 4, [](double x, double) { return sigmoid_ref(x); }},
      {EwOp::silu, -8, 8, 4, [](double x, double) { return x * sigmoid_ref(x); }},
  };
  const int64_t n = 1037;  // off every vector width: the tails run too
  for (DType dt : kFloatTypes) {
    for (const EwCase& c : cases) {
      const bool binary = kernels::ew_arity(c.op) == 2;
      const std::vector<double> x = inputs(n, 1, c.lo, c.hi, dt), y = inputs(n, 2, 0.5, 4, dt);
      const Tensor a = from_vector(x, {n}, dt), b = from_vector(y, {n}, dt);
      const std::vector<double> got =
          kernels::elementwise(c.op, a, binary ? b : Tensor(), dt, {}).to_vector();
      std::vector<double> ref(x.size());
      for (size_t i = 0; i < x.size(); ++i) ref[i] = c.ref(x[i], y[i]);
      expect_within(
          got, ref,
          [&](size_t i) {
            return c.ulps * ulp_of(ref[i], DType::f32) + std::ldexp(1.0, -120) +
                   store_ulp(ref[i], dt);
          },
          label(kernels::ew_name(c.op), dt));
    }
  }
}

// x [rows, n], w, b [n]: y and rstd of the f64 formulas. Bound: 2^-18 · ((|x| + |mean|)·rstd·|w|
// + |b|) (f32 sums of n = 301 squares in lane order, a sqrt and three products), plus the store's
// ulp; rstd within 2^-18 relative.
TEST_P(KernelMatrix, RmsNormAndLayerNorm) {
  const int64_t rows = 7, n = 301;
  const double eps = 1e-5;
  for (DType dt : kFloatTypes) {
    for (kernels::NormKind kind : {kernels::NormKind::rms, kernels::NormKind::layer}) {
      const bool layer = kind == kernels::NormKind::layer;
      const std::vector<double> x = inputs(rows * n, 3, -3, 3, dt), w = inputs(n, 4, 0.5, 1.5, dt),
                                bias = inputs(n, 5, -1, 1, dt);
      const kernels::NormForward f =
          kernels::norm_forward(kind, from_vector(x, {rows, n}, dt), from_vector(w, {n}, dt),
                                layer ? from_vector(bias, {n}, dt) : Tensor(), eps);
      std::vector<double> ref(x.size()), scale(x.size()), rstd(rows);
      for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x.data() + r * n;
        const double mean = layer ? std::accumulate(xr, xr + n, 0.0) / n : 0.0;
        double sq = 0;
        for (int64_t j = 0; j < n; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
        rstd[r] = 1.0 / std::sqrt(sq / n + eps);
        for (int64_t j = 0; j < n; ++j) {
          const double bj = layer ? bias[j] : 0.0;
          ref[r * n + j] = (xr[j] - mean) * rstd[r] * w[j] + bj;
          scale[r * n + j] =
              (std::fabs(xr[j]) + std::fabs(mean)) * rstd[r] * std::fabs(w[j]) + std::fabs(bj);
        }
      }
      const std::string what = label(layer ? "layer_norm" : "rms_norm", dt);
      expect_within(
          f.y.to_vector(), ref,
          [&](size_t i) { return std::ldexp(scale[i], -18) + store_ulp(ref[i], dt); }, what);
      expect_within(
          f.rstd.to_vector(), rstd, [&](size_t r) { return std::ldexp(rstd[r], -18); },
          what + " rstd");
    }
  }
}

// Row-wise log-sum-exp of x [rows, n] in f64.
std::vector<double> lse_ref(const std::vector<double>& x, int64_t rows, int64_t n) {
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * n;
    const double mx = *std::max_element(xr, xr + n);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(xr[j] - mx);
    out[r] = mx + std::log(s);
  }
  return out;
}

// softmax, log_softmax and logsumexp of x [rows, n], x in [-6, 6). Bounds: softmax 2^-19·y (exp's
// 2 ulp, the sum's rounding and a divide); log_softmax and logsumexp 2^-21·(|x| + |lse|) (they
// subtract O(1) terms); plus the store's ulp.
TEST_P(KernelMatrix, SoftmaxRows) {
  const int64_t rows = 5, n = 257;
  for (DType dt : kFloatTypes) {
    const std::vector<double> x = inputs(rows * n, 6, -6, 6, dt);
    const Tensor xt = from_vector(x, {rows, n}, dt);
    const std::vector<double> lse = lse_ref(x, rows, n);
    std::vector<double> sm(x.size()), lsm(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      lsm[i] = x[i] - lse[i / n];
      sm[i] = std::exp(lsm[i]);
    }
    expect_within(
        kernels::softmax_lastdim(xt, false).to_vector(), sm,
        [&](size_t i) { return std::ldexp(sm[i], -19) + 1e-30 + store_ulp(sm[i], dt); },
        label("softmax", dt));
    expect_within(
        kernels::softmax_lastdim(xt, true).to_vector(), lsm,
        [&](size_t i) {
          return std::ldexp(std::fabs(x[i]) + std::fabs(lse[i / n]), -21) + store_ulp(lsm[i], dt);
        },
        label("log_softmax", dt));
    expect_within(
        kernels::logsumexp_lastdim(xt).to_vector(), lse,
        [&](size_t r) { return std::ldexp(6 + std::fabs(lse[r]), -21) + store_ulp(lse[r], dt); },
        label("logsumexp", dt));
  }
}

// Fused cross-entropy of logits [rows, n]: loss = lse - x[target] (f32) within
// 2^-21·(|lse| + |x_t|); dlogits = (softmax - onehot)·scale within 2^-19·(p + onehot)·scale,
// plus the store's ulp. One row is ignored (loss 0, gradient 0).
TEST_P(KernelMatrix, CrossEntropyRows) {
  const int64_t rows = 6, n = 203, ignore = -100;
  const std::vector<int64_t> targets = {0, 202, 17, ignore, 100, 5};
  const std::vector<double> scales(rows, 0.25);
  for (DType dt : kFloatTypes) {
    const std::vector<double> x = inputs(rows * n, 7, -6, 6, dt);
    const Tensor xt = from_vector(x, {rows, n}, dt);
    Tensor loss, lse_t;
    kernels::cross_entropy_forward(xt, targets, ignore, &loss, &lse_t);
    const std::vector<double> lse = lse_ref(x, rows, n);
    std::vector<double> loss_ref(rows), dx_ref(x.size()), dx_mag(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const bool skip = targets[r] == ignore;
      loss_ref[r] = skip ? 0.0 : lse[r] - x[r * n + targets[r]];
      for (int64_t j = 0; j < n; ++j) {
        const double p = std::exp(x[r * n + j] - lse[r]), hot = j == targets[r] ? 1.0 : 0.0;
        dx_ref[r * n + j] = skip ? 0.0 : (p - hot) * scales[r];
        dx_mag[r * n + j] = skip ? 0.0 : (p + hot) * scales[r];
      }
    }
    expect_within(
        loss.to_vector(), loss_ref,
        [&](size_t r) { return std::ldexp(std::fabs(lse[r]) + 6, -21); },
        label("cross_entropy loss", dt));
    const Tensor dx = kernels::cross_entropy_backward(xt, lse_t, targets, ignore, scales);
    expect_within(
        dx.to_vector(), dx_ref,
        [&](size_t i) { return std::ldexp(dx_mag[i], -19) + 1e-30 + store_ulp(dx_ref[i], dt); },
        label("cross_entropy dlogits", dt));
  }
}

// x [B, T, H, D] rotated per position t (seq_dim 1) by f32 cos/sin [T, D/2], both pair layouts,
// forward and inverse. Bound: 2^-22·(|a| + |b|) for the pair (a, b) (two rounded products and a
// rounded sum, |cos|, |sin| <= 1), plus the store's ulp.
TEST_P(KernelMatrix, Rope) {
  const int64_t B = 2, T = 5, H = 3, D = 40, half = D / 2;
  std::vector<double> c(T * half), s(T * half);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double th = t * std::pow(10000.0, -2.0 * i / D);
      c[t * half + i] = static_cast<float>(std::cos(th));
      s[t * half + i] = static_cast<float>(std::sin(th));
    }
  const Tensor ct = from_vector(c, {T, half}), st = from_vector(s, {T, half});
  for (DType dt : kFloatTypes)
    for (bool interleaved : {false, true})
      for (bool inverse : {false, true}) {
        const std::vector<double> x = inputs(B * T * H * D, 8, -4, 4, dt);
        const Tensor out = empty({B, T, H, D}, dt);
        kernels::rope(from_vector(x, {B, T, H, D}, dt), ct, st, out, interleaved, 1, inverse);
        std::vector<double> ref(x.size()), mag(x.size());
        for (int64_t row = 0; row < B * T * H; ++row) {
          const int64_t t = (row / H) % T;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t ia = row * D + (interleaved ? 2 * i : i);
            const int64_t ib = row * D + (interleaved ? 2 * i + 1 : i + half);
            const double a = x[ia], b = x[ib], cs = c[t * half + i];
            const double sn = inverse ? -s[t * half + i] : s[t * half + i];
            ref[ia] = a * cs - b * sn;
            ref[ib] = b * cs + a * sn;
            mag[ia] = mag[ib] = std::fabs(a) + std::fabs(b);
          }
        }
        expect_within(
            out.to_vector(), ref,
            [&](size_t i) { return std::ldexp(mag[i], -22) + store_ulp(ref[i], dt); },
            label(interleaved ? (inverse ? "rope interleaved inverse" : "rope interleaved")
                              : (inverse ? "rope inverse" : "rope"),
                  dt));
      }
}

// o and lse of f32 attention (f32 is the one dtype the kernels take), grouped-query, causal and
// full, against softmax(q kᵀ / sqrt(D)) v in f64. Bound (attention_test.cpp): 2e-5 · max(max|ref|,
// 0.1) per output, normwise.
TEST_P(KernelMatrix, AttentionForward) {
  const int64_t B = 1, Hq = 4, Hkv = 2, T = 70, D = 24;
  const std::vector<double> q = inputs(B * Hq * T * D, 9, -1, 1, DType::f32),
                            k = inputs(B * Hkv * T * D, 10, -1, 1, DType::f32),
                            v = inputs(B * Hkv * T * D, 11, -1, 1, DType::f32);
  const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
  for (bool causal : {true, false}) {
    std::vector<float> o(qf.size()), lse(static_cast<size_t>(B * Hq * T));
    kernels::AttentionOptions opt;
    opt.causal = causal;
    kernels::attention_forward({B, Hq, Hkv, T, T, D}, opt,
                               {qf.data(), kernels::attention_strides_bhtd(Hq, T, D)},
                               {kf.data(), kernels::attention_strides_bhtd(Hkv, T, D)},
                               {vf.data(), kernels::attention_strides_bhtd(Hkv, T, D)},
                               {o.data(), kernels::attention_strides_bhtd(Hq, T, D)}, lse.data());
    std::vector<double> o_ref(o.size()), lse_ref_v(lse.size());
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double* qi = q.data() + (h * T + i) * D;
        const int64_t kvh = h / (Hq / Hkv), nk = causal ? i + 1 : T;
        std::vector<double> sc(static_cast<size_t>(nk));
        for (int64_t j = 0; j < nk; ++j) {
          const double* kj = k.data() + (kvh * T + j) * D;
          sc[j] = std::inner_product(qi, qi + D, kj, 0.0) / std::sqrt(double(D));
        }
        const double l = lse_ref(sc, 1, nk)[0];
        lse_ref_v[h * T + i] = l;
        for (int64_t j = 0; j < nk; ++j)
          for (int64_t d = 0; d < D; ++d)
            o_ref[(h * T + i) * D + d] += std::exp(sc[j] - l) * v[(kvh * T + j) * D + d];
      }
    for (auto [got, ref, name] :
         {std::tuple{&o, &o_ref, "attention o"}, std::tuple{&lse, &lse_ref_v, "attention lse"}}) {
      double mx = 0.1;
      for (double r : *ref) mx = std::max(mx, std::fabs(r));
      expect_within(
          std::vector<double>(got->begin(), got->end()), *ref, [&](size_t) { return 2e-5 * mx; },
          std::string(name) + (causal ? " causal f32" : " full f32"));
    }
  }
}

// The gate's top-k of f32 rows (value descending, ties to the lower index) equals the sorted
// reference exactly; where the ISA has the fused sigmoid row, p within 4 ulp of the f64 sigmoid
// (the elementwise bound) and its selection that of c = p + bias.
TEST_P(KernelMatrix, GateTopK) {
  const kernels::GateTopKTable& tab = kernels::kernel_table<kernels::GateTopKTable>();
  const int64_t e = 64, k = 8;
  std::vector<int64_t> idx(k), gidx(1);
  std::vector<float> val(k), gval(1), top2(2), kept2(2);
  std::vector<char> keep(1);
  const kernels::GateTopKScratch w{idx.data(),  val.data(),   gidx.data(), gval.data(),
                                   top2.data(), kept2.data(), keep.data()};
  auto reference = [&](const std::vector<float>& c) {
    std::vector<int64_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return c[a] > c[b]; });
    return std::vector<int64_t>(order.begin(), order.begin() + k);
  };
  for (int row = 0; row < 20; ++row) {
    const std::vector<double> l = inputs(e, 12 + row, -4, 4, DType::f32);
    std::vector<float> c(l.begin(), l.end());
    if (row % 2)
      for (float& x : c) x = std::round(x * 2) / 2;  // ties
    tab.topk(c.data(), {e, k, 1, 1}, w);
    ASSERT_EQ(idx, reference(c)) << "topk row " << row;
    if (!tab.sigmoid_topk) continue;
    const std::vector<float> bias(static_cast<size_t>(e), 0.125f);
    std::vector<float> p(e), cb(e);
    tab.sigmoid_topk(c.data(), bias.data(), p.data(), cb.data(), {e, k, 1, 1}, w);
    for (int64_t j = 0; j < e; ++j) {
      const double want = sigmoid_ref(c[j]);
      ASSERT_LE(std::fabs(p[j] - want), 4 * ulp_of(want, DType::f32)) << "sigmoid " << c[j];
    }
    ASSERT_EQ(idx, reference(cb)) << "sigmoid_topk row " << row;
  }
  if (!tab.sigmoid_topk) std::printf("  %s: no fused sigmoid row (gate_topk.h)\n", isa_label());
}

// f64 round to nearest even of x to bf16's 8 significant bits.
double bf16_round_ref(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::ilogb(x);
  return std::ldexp(std::nearbyint(std::ldexp(x, 7 - e)), e - 7);
}

// The fusion routines on f32 runs (their one dtype; bf16 enters through chains): scalar-operand
// ops, select, fill and round_bf16 exact (one IEEE operation or none), row max exact, the streaming
// row sum within (n - 1)·2^-24·Σ|x| (any summation order).
TEST_P(KernelMatrix, FusionRoutines) {
  const fusion::RoutineTable& rt = kernels::kernel_table<fusion::RoutineTable>();
  const int64_t n = 1000;
  const std::vector<double> xd = inputs(n, 13, -5, 5, DType::f32);
  const std::vector<float> x(xd.begin(), xd.end());
  const float* in1[1] = {x.data()};
  const float* sel[3] = {x.data(), x.data() + 1, x.data() + 2};
  const float p[4] = {0, 0, 0, 1.5f};
  auto exact = [](size_t) { return 0.0; };
  std::vector<float> out(n);
  std::vector<double> ref(n);
  auto got = [&](int64_t m) { return std::vector<double>(out.begin(), out.begin() + m); };
  auto want = [&](int64_t m) { return std::vector<double>(ref.begin(), ref.begin() + m); };

  rt.vs[static_cast<int>(EwOp::mul)](out.data(), in1, n, p);
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<float>(xd[i] * 1.5);
  expect_within(got(n), want(n), exact, "routines vs mul f32");
  rt.sv[static_cast<int>(EwOp::sub)](out.data(), in1, n, p);
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<float>(1.5 - xd[i]);
  expect_within(got(n), want(n), exact, "routines sv sub f32");
  rt.select(out.data(), sel, n - 2);
  for (int64_t i = 0; i < n - 2; ++i) ref[i] = x[i] != 0 ? x[i + 1] : x[i + 2];
  expect_within(got(n - 2), want(n - 2), exact, "routines select f32");
  rt.fill(out.data(), 0.75f, n);
  std::fill(ref.begin(), ref.end(), 0.75);
  expect_within(got(n), want(n), exact, "routines fill f32");
  rt.round_bf16(out.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) ref[i] = bf16_round_ref(xd[i]);
  expect_within(got(n), want(n), exact, "routines round_bf16 f32");

  alignas(64) float acc[fusion::kAccFloats];
  double sum = 0, abs_sum = 0;
  for (double v : xd) sum += v, abs_sum += std::fabs(v);
  for (int red : {0, 1}) {
    rt.red_init(acc, red);
    rt.red_chunk(acc, x.data(), 960, red);  // chunks: multiples of 64 elements
    const double r = rt.red_finish(acc, x.data() + 960, n - 960, red);
    const double w = red == 0 ? sum : *std::max_element(xd.begin(), xd.end());
    const double bound = red == 0 ? (n - 1) * std::ldexp(abs_sum, -24) : 0.0;
    expect_within(
        {r}, {w}, [&](size_t) { return bound; },
        red == 0 ? "routines row sum f32" : "routines row max f32");
  }
}

// One MX block row of x [rows, cols] checked against the f64 model: the scale 2^e with e =
// floor(log2 amax) - emax (floor) or ceil(log2(amax / max_normal)) (rceil), exactly; each element
// decoded times the scale within half the format's spacing at x / scale (clamped to ±max normal),
// times the scale: the rounding to nearest of the f64 quotient.
void check_mx_block(const double* x, int64_t stride, const uint8_t* codes, int64_t code_stride,
                    uint8_t scale, mx::QuantSpec spec, const std::string& what) {
  const mx::FormatInfo& f = mx::format_info(spec.elem);
  double amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i * stride]));
  int e = -127;
  if (amax > 0)
    e = spec.scale_mode == mx::ScaleMode::floor
            ? std::ilogb(amax) - f.emax
            : static_cast<int>(std::ceil(std::log2(amax / f.max_normal)));
  e = std::clamp(e, -127, 127);
  ASSERT_EQ(int(scale) - 127, e) << what << " amax " << amax;
  const double sc = std::ldexp(1.0, e);
  for (int i = 0; i < 32; ++i) {
    const double y = std::clamp(x[i * stride] / sc, -double(f.max_normal), double(f.max_normal));
    const double got = mx::decode_elem(codes[i * code_stride], spec.elem);
    const int ey = std::max(y == 0 ? -126 : std::ilogb(y), std::ilogb(f.min_normal));
    ASSERT_LE(std::fabs(got - y), std::ldexp(0.5, ey - f.mant_bits))
        << what << " x " << x[i * stride];
  }
}

// MX quantization of f32 and bf16 x [64, 96], row-wise and column-wise blocks, both element
// formats and scale modes, against check_mx_block's f64 model.
TEST_P(KernelMatrix, MxQuantize) {
  const int64_t rows = 64, cols = 96;
  for (DType dt : {DType::f32, DType::bf16})
    for (mx::ElemFormat elem : {mx::ElemFormat::e4m3, mx::ElemFormat::e5m2})
      for (mx::ScaleMode mode : {mx::ScaleMode::floor, mx::ScaleMode::rceil}) {
        const mx::QuantSpec spec{elem, mode};
        std::vector<double> x = inputs(rows * cols, 14, -1, 1, dt);
        for (int64_t i = 0; i < rows * cols; ++i)  // magnitudes over 2^-12 .. 2^12 (still dt's)
          x[i] = std::ldexp(x[i], int(i % 25) - 12);
        const Tensor xt = from_vector(x, {rows, cols}, dt);
        std::vector<uint8_t> codes(rows * cols), rs(rows * cols / 32), cs(rows / 32 * cols);
        const std::string what = label("mx", dt) + " " + std::string(mx::elem_format_name(elem)) +
                                 " " + std::string(mx::scale_mode_name(mode));
        mx::quantize_rowwise(xt.raw_data(), dt, rows, cols, spec, codes.data(), rs.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t b = 0; b < cols / 32; ++b)
            check_mx_block(&x[r * cols + b * 32], 1, &codes[r * cols + b * 32], 1,
                           rs[r * (cols / 32) + b], spec, what + " row-wise");
        mx::quantize_colwise(xt.raw_data(), dt, rows, cols, spec, codes.data(), cs.data());
        for (int64_t b = 0; b < rows / 32; ++b)
          for (int64_t c = 0; c < cols; ++c)
            check_mx_block(&x[b * 32 * cols + c], cols, &codes[b * 32 * cols + c], cols,
                           cs[b * cols + c], spec, what + " column-wise");
        if (HasFatalFailure()) return;
        std::printf("  %-44s scales exact, elements within half a spacing\n", what.c_str());
      }
}

// One AdamW step on f32 buffers (master weights: f32 only) against the torch formula in f64 with
// the step's f32 scalars. Bounds: m within 2^-21·(|m| + |g'|), v within 2^-21·(β2 v + (1-β2) g'²),
// p within 2^-21·|p·decay| + 2^-19·|update| (a handful of f32 roundings each).
TEST_P(KernelMatrix, AdamW) {
  const int64_t n = 1003;
  const optim::AdamWStep s = optim::adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 0.1, 3, 0.5);
  const std::vector<double> p0 = inputs(n, 15, -1, 1, DType::f32),
                            g = inputs(n, 16, -2, 2, DType::f32),
                            m0 = inputs(n, 17, -0.1, 0.1, DType::f32),
                            v0 = inputs(n, 18, 0, 0.01, DType::f32);
  std::vector<float> p(p0.begin(), p0.end()), gf(g.begin(), g.end()), m(m0.begin(), m0.end()),
      v(v0.begin(), v0.end());
  optim::adamw_update(p.data(), gf.data(), m.data(), v.data(), n, s);
  std::vector<double> p_ref(n), m_ref(n), v_ref(n), bp(n), bm(n), bv(n);
  for (int64_t i = 0; i < n; ++i) {
    const double gs = g[i] * double(s.grad_scale), p1 = p0[i] * double(s.decay);
    m_ref[i] = m0[i] + double(s.one_minus_beta1) * (gs - m0[i]);
    v_ref[i] = double(s.beta2) * v0[i] + double(s.one_minus_beta2) * gs * gs;
    const double upd = double(s.step_size) * m_ref[i] /
                       (std::sqrt(v_ref[i]) / double(s.bias_correction2_sqrt) + double(s.eps));
    p_ref[i] = p1 - upd;
    bm[i] = std::ldexp(std::fabs(m0[i]) + std::fabs(gs), -21);
    bv[i] = std::ldexp(v_ref[i], -21);
    bp[i] = std::ldexp(std::fabs(p1), -21) + std::ldexp(std::fabs(upd), -19);
  }
  expect_within(
      {m.begin(), m.end()}, m_ref, [&](size_t i) { return bm[i]; }, "adamw m f32");
  expect_within(
      {v.begin(), v.end()}, v_ref, [&](size_t i) { return bv[i]; }, "adamw v f32");
  expect_within(
      {p.begin(), p.end()}, p_ref, [&](size_t i) { return bp[i]; }, "adamw p f32");
}

}  // namespace
}  // namespace hp
