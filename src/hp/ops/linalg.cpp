// matmul / linear: batched GEMM with broadcasting over leading dims.
//
// Operands are passed to the GEMM kernels with transpose flags and leading dims taken from their
// strides, so transposed views (the backward's Bᵀ and Aᵀ) cost no copy. Batch dims are broadcast
// and flattened to one batch stride when the layout allows, copied otherwise.
#include <algorithm>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/ops/checks.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// A [batch, rows, cols] operand as the GEMM kernels take it.
struct MatArg {
  Tensor base;        // keeps the memory alive
  const char* ptr;    // element (0, 0, 0)
  bool trans = false; // stored column-major (a transposed view)
  int64_t ld = 0;     // leading dim in elements
  int64_t batch_stride = 0;
};

// Expands t [..., r, c] to batch shape `bshape` and describes it for the kernels; copies when the
// matrix is not unit-stride in either dim or the batch dims do not flatten to one stride.
MatArg describe(const Tensor& t_in, const Shape& bshape) {
  Shape full = bshape;
  full.push_back(t_in.size(-2));
  full.push_back(t_in.size(-1));
  Tensor t = expand(t_in.requires_grad() ? t_in.detach() : t_in, full);
  const int64_t nd = t.dim();
  const int64_t r = t.shape()[nd - 2], c = t.shape()[nd - 1];
  const int64_t sr = t.strides()[nd - 2], sc = t.strides()[nd - 1];
  bool ok_mat = (sc == 1 && sr >= std::max<int64_t>(c, 1)) || (sr == 1 && sc >= std::max<int64_t>(r, 1));
  // Batch dims flatten to one stride when each outer stride = inner stride × inner size.
  int64_t bstride = 0;
  bool ok_batch = true;
  {
    int64_t expect = -1;
    for (int64_t d = nd - 3; d >= 0; --d) {
      if (t.shape()[d] == 1) continue;
      if (expect == -1) {
        bstride = t.strides()[d];
      } else if (t.strides()[d] != expect) {
        ok_batch = false;
      }
      expect = t.strides()[d] * t.shape()[d];
    }
  }
  if (!ok_mat || !ok_batch) {
    t = t.contiguous();
    bstride = r * c;
  }
  MatArg m;
  m.base = t;
  m.ptr = static_cast<const char*>(t.raw_data());
  const int64_t tsr = t.strides()[nd - 2], tsc = t.strides()[nd - 1];
  if (tsc == 1 && (tsr >= std::max<int64_t>(c, 1) || r == 1)) {
    m.trans = false;
    m.ld = std::max<int64_t>(tsr, std::max<int64_t>(c, 1));
  } else {
    m.trans = true;
    m.ld = std::max<int64_t>(tsc, std::max<int64_t>(r, 1));
  }
  m.batch_stride = bstride;
  return m;
}

// Reference GEMM in double (f64 tensors: gradient checks).
void gemm_f64(const MatArg& a, const MatArg& b, int64_t batch, int64_t M, int64_t N, int64_t K,
              double* c) {
  parallel_for(0, batch * M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / M, i = r % M;
      const double* A = reinterpret_cast<const double*>(a.ptr) + bi * a.batch_stride;
      const double* B = reinterpret_cast<const double*>(b.ptr) + bi * b.batch_stride;
      double* C = c + (bi * M + i) * N;
      for (int64_t j = 0; j < N; ++j) C[j] = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = a.trans ? A[k * a.ld + i] : A[i * a.ld + k];
        for (int64_t j = 0; j < N; ++j) C[j] += av * (b.trans ? B[j * b.ld + k] : B[k * b.ld + j]);
      }
    }
  });
}

Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  // a [..., M, K], b [..., K, N] (both at least 2-D here).
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (b.size(-2) != K)
    HP_THROW(ValueError, "matmul", "inner dims differ: ", a.desc(), " @ ", b.desc());
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape bshape = kernels::broadcast_shapes(ba, bb, "matmul");
  const int64_t batch = shape_numel(bshape);
  DType dt = kernels::promote_types(a.dtype(), b.dtype());
  if (dt == DType::f16) dt = DType::f32;
  Tensor ac = a.dtype() == dt ? a : a.to(dt), bc = b.dtype() == dt ? b : b.to(dt);
  MatArg A = describe(ac, bshape), B = describe(bc, bshape);
  Shape out_shape = bshape;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = empty(out_shape, dt);
  if (out.numel() == 0) return out;
  if (dt == DType::f64) {
    gemm_f64(A, B, batch, M, N, K, out.data<double>());
  } else if (dt == DType::f32) {
    kernels::gemm_f32_batched(A.trans, B.trans, batch, M, N, K, 1.0f,
                              reinterpret_cast<const float*>(A.ptr), A.ld, A.batch_stride,
                              reinterpret_cast<const float*>(B.ptr), B.ld, B.batch_stride, 0.0f,
                              out.data<float>(), N, M * N);
  } else if (dt == DType::bf16) {
    kernels::gemm_bf16_batched(A.trans, B.trans, batch, M, N, K, 1.0f,
                               reinterpret_cast<const uint16_t*>(A.ptr), A.ld, A.batch_stride,
                               reinterpret_cast<const uint16_t*>(B.ptr), B.ld, B.batch_stride,
                               0.0f, out.raw_data(), DType::bf16, N, M * N);
  } else {
    HP_THROW(ValueError, "matmul", "unsupported dtypes ", a.desc(), " @ ", b.desc());
  }
  return out;
}

void check_matmul_input(const Tensor& t) {
  detail::check_float_tensor(t, "matmul", "operand");
  if (t.dim() == 0) HP_THROW(ValueError, "matmul", "0-d operand ", t.desc());
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  HP_PROFILE_OP("matmul");
  check_matmul_input(a);
  check_matmul_input(b);
  // numpy rules for 1-D operands: a [K] → [1, K], b [K] → [K, 1], the added dim removed after.
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  Tensor y = matmul_nd(a, b);
  if (autograd::needs_grad({a, b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    autograd::SavedTensor sa(gb ? a : Tensor()), sb(ga ? b : Tensor());
    const Shape sha = a.shape(), shb = b.shape();
    const DType da = a.dtype(), db = b.dtype();
    autograd::record("matmul", {a, b}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor gx, gz;
      if (ga) gx = cast(sum_to(matmul_nd(g[0], transpose(sb.unpack(), -1, -2)), sha), da);
      if (gb) gz = cast(sum_to(matmul_nd(transpose(sa.unpack(), -1, -2), g[0]), shb), db);
      return std::vector<Tensor>{gx, gz};
    });
  }
  return y;
}

Tensor linear_weight_grad(const Tensor& x2, const Tensor& dy2) {
  HP_CHECK(x2.dim() == 2 && dy2.dim() == 2 && x2.size(0) == dy2.size(0), "linear_weight_grad of ",
           x2.desc(), " and ", dy2.desc());
  // dy2ᵀ is a transposed view that describe() hands to the GEMM as trans_a, so dW is written
  // straight into a contiguous [out, in] buffer: no [in, out] product to transpose and copy.
  return matmul_nd(transpose(dy2, 0, 1), x2);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  HP_PROFILE_OP("linear");
  if (!w.defined() || w.dim() != 2)
    HP_THROW(ValueError, "linear", "weight must be [out, in], got ", w.desc());
  if (!x.defined() || x.dim() < 1 || x.size(-1) != w.size(1))
    HP_THROW(ValueError, "linear", "input ", x.desc(), " does not match weight ", w.desc());
  check_matmul_input(x);
  check_matmul_input(w);
  // [..., in] → x2 [N, in] so that the GEMM runs once over all rows; y [N, out] = x2 · wᵀ (wᵀ a
  // view, passed as trans_b).
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  const Tensor x2 = reshape(x, {-1, w.size(1)});
  Tensor y = matmul_nd(x2, transpose(w, 0, 1));
  if (autograd::needs_grad({x2, w})) {
    // Its own node rather than matmul's: matmul's gradient of wᵀ is [in, out], which reaches w
    // as a transposed view that AccumulateGrad has to copy.
    const bool gx = x2.requires_grad(), gw = w.requires_grad();
    autograd::SavedTensor sx(gw ? x2 : Tensor()), sw(gx ? w : Tensor());
    const DType dx = x2.dtype(), dw = w.dtype();
    autograd::record("linear", {x2, w}, {y}, [=](const std::vector<Tensor>& g) {
      Tensor gx2, gw2;
      if (gx) gx2 = cast(matmul_nd(g[0], sw.unpack()), dx);  // [N, out] · [out, in]
      if (gw) gw2 = cast(linear_weight_grad(sx.unpack(), g[0]), dw);  // [out, in]
      return std::vector<Tensor>{gx2, gw2};
    });
  }
  if (bias.defined()) {
    if (bias.dim() != 1 || bias.size(0) != w.size(0))
      HP_THROW(ValueError, "linear", "bias ", bias.desc(), " does not match weight ", w.desc());
    y = add(y, bias);
  }
  lead.push_back(w.size(0));
  return reshape(y, lead);
}

}  // namespace hp
