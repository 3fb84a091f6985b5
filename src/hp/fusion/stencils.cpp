// The stencil matcher and runner (stencils.h).
#include "hp/fusion/stencils.h"

#include "hp/ops/ops.h"

namespace hp::fusion {

namespace {

using kernels::EwOp;

bool is_ew(const Node& n, EwOp op) {
  return n.kind == NodeKind::ew && n.op == static_cast<uint8_t>(op);
}

bool float_dtype(DType dt) { return dt == DType::f32 || dt == DType::bf16; }

// The operand pair of a commutative binary node n ordered so that first(a) holds: a, b = ids.
template <class First>
bool split(const Graph& g, const Node& n, First first, int32_t* a, int32_t* b) {
  for (int k = 0; k < 2; ++k) {
    const int32_t x = n.in[k], y = n.in[1 - k];
    if (first(g.nodes[static_cast<size_t>(x)])) {
      *a = x, *b = y;
      return true;
    }
  }
  return false;
}

// x of a stencil: an f32 node that is its source itself or cast(source bf16, f32); y (output)
// rounds back to the source's dtype. Sets the source node id.
bool f32_view(const Graph& g, int32_t x, const Node& Y, int32_t* src) {
  const Node& X = g.nodes[static_cast<size_t>(x)];
  if (X.dtype != DType::f32 || X.shape.n < 1 || X.shape.last() < 1) return false;
  *src = X.kind == NodeKind::cast ? X.in[0] : x;
  const Node& S = g.nodes[static_cast<size_t>(*src)];
  if (X.kind == NodeKind::cast && S.dtype != DType::bf16) return false;
  return S.dtype == (Y.kind == NodeKind::cast ? Y.dtype : DType::f32);
}

bool is_reduce(const Node& n, RedOp op) {
  return n.kind == NodeKind::reduce && n.op == static_cast<uint8_t>(op);
}

// y = cast(e / sum(e) or e · reciprocal(sum(e)), …), e = exp(x - amax(x)); sets the source of x.
bool match_softmax(const Graph& g, int32_t y, int32_t* src) {
  const Node& Y = g.nodes[static_cast<size_t>(y)];
  const Node& D = Y.kind == NodeKind::cast ? g.nodes[static_cast<size_t>(Y.in[0])] : Y;
  if (D.dtype != DType::f32) return false;
  int32_t e = -1, s = -1;
  if (is_ew(D, EwOp::div)) {
    e = D.in[0], s = D.in[1];
  } else if (is_ew(D, EwOp::mul)) {
    int32_t rc = -1;
    if (!split(g, D, [](const Node& n) { return is_ew(n, EwOp::reciprocal); }, &rc, &e))
      return false;
    s = g.nodes[static_cast<size_t>(rc)].in[0];
  } else {
    return false;
  }
  const Node& E = g.nodes[static_cast<size_t>(e)];
  const Node& S = g.nodes[static_cast<size_t>(s)];
  if (!is_reduce(S, RedOp::sum) || S.in[0] != e || !is_ew(E, EwOp::exp)) return false;
  const Node& Sub = g.nodes[static_cast<size_t>(E.in[0])];
  if (!is_ew(Sub, EwOp::sub)) return false;
  const int32_t x = Sub.in[0];
  const Node& M = g.nodes[static_cast<size_t>(Sub.in[1])];
  if (!is_reduce(M, RedOp::max) || M.in[0] != x) return false;
  const Node& X = g.nodes[static_cast<size_t>(x)];
  if (!(D.shape == X.shape) || !(E.shape == X.shape)) return false;
  return f32_view(g, x, Y, src);
}

// y = cast((x · rsqrt(affine(sum(x·x), 1/n, 0) + eps)) · w, dtype of x's source), x = the source
// itself (f32) or cast(source bf16, f32); w an input [n]. Sets the source node, w's argument number
// and eps.
bool match_rms(const Graph& g, int32_t y, int32_t* src, int32_t* w_arg, float* eps) {
  const Node& Y = g.nodes[static_cast<size_t>(y)];
  const Node& M2 = Y.kind == NodeKind::cast ? g.nodes[static_cast<size_t>(Y.in[0])] : Y;
  if (!is_ew(M2, EwOp::mul) || M2.dtype != DType::f32) return false;
  int32_t w = -1, m1 = -1;
  if (!split(
          g, M2,
          [](const Node& n) { return n.kind == NodeKind::input && n.shape.n == 1; }, &w, &m1))
    return false;
  const Node& W = g.nodes[static_cast<size_t>(w)];
  const Node& M1 = g.nodes[static_cast<size_t>(m1)];
  if (!is_ew(M1, EwOp::mul) || M1.dtype != DType::f32 || !float_dtype(W.dtype)) return false;
  int32_t r = -1, x = -1;
  if (!split(g, M1, [](const Node& n) { return is_ew(n, EwOp::rsqrt); }, &r, &x)) return false;
  const Node& X = g.nodes[static_cast<size_t>(x)];
  const int64_t n = X.shape.last();
  if (!f32_view(g, x, Y, src) || W.shape.d[0] != n || !(M2.shape == X.shape) ||
      !(M1.shape == X.shape))
    return false;
  // rsqrt(mean(x²) + eps)
  const Node& R = g.nodes[static_cast<size_t>(r)];
  const Node& A = g.nodes[static_cast<size_t>(R.in[0])];
  if (R.dtype != DType::f32 || !is_ew(A, EwOp::add) || A.dtype != DType::f32) return false;
  int32_t c = -1, mn = -1;
  if (!split(g, A, [](const Node& k) { return k.kind == NodeKind::constant; }, &c, &mn))
    return false;
  const Node& Mn = g.nodes[static_cast<size_t>(mn)];
  if (!is_ew(Mn, EwOp::affine) || Mn.p[0] != static_cast<float>(1.0 / static_cast<double>(n)) ||
      Mn.p[1] != 0.0f)
    return false;
  const Node& Su = g.nodes[static_cast<size_t>(Mn.in[0])];
  if (!is_reduce(Su, RedOp::sum)) return false;
  const Node& Q = g.nodes[static_cast<size_t>(Su.in[0])];
  const bool square = is_ew(Q, EwOp::square) && Q.in[0] == x;
  if (!square && !(is_ew(Q, EwOp::mul) && Q.in[0] == x && Q.in[1] == x)) return false;
  *eps = g.nodes[static_cast<size_t>(c)].p[0];
  *w_arg = W.index;
  return *eps >= 0;  // hp::rms_norm rejects a negative eps: the generic program runs it
}

}  // namespace

Stencil match_stencil(const Graph& g) {
  Stencil s;
  if (!g.opaque.empty() || g.outputs.empty() || g.outputs.size() > 2) return s;
  int32_t src = -1, w = -1;
  float eps = 0;
  if (g.outputs.size() == 1 && match_softmax(g, g.outputs[0], &src)) {
    if (g.nodes[static_cast<size_t>(src)].kind != NodeKind::input) return s;
    s.kind = StencilKind::softmax;
    s.in[0] = static_cast<int16_t>(g.nodes[static_cast<size_t>(src)].index);
    return s;
  }
  if (!match_rms(g, g.outputs.back(), &src, &w, &eps)) return s;
  const Node& S = g.nodes[static_cast<size_t>(src)];
  if (g.outputs.size() == 1 && S.kind == NodeKind::input) {
    s.kind = StencilKind::rms_norm;
    s.in[0] = static_cast<int16_t>(S.index), s.in[1] = static_cast<int16_t>(w);
  } else if (g.outputs.size() == 2 && g.outputs[0] == src && is_ew(S, EwOp::add) &&
             g.nodes[static_cast<size_t>(S.in[0])].kind == NodeKind::input &&
             g.nodes[static_cast<size_t>(S.in[1])].kind == NodeKind::input) {
    s.kind = StencilKind::add_rms_norm;
    s.in[0] = static_cast<int16_t>(g.nodes[static_cast<size_t>(S.in[0])].index);
    s.in[1] = static_cast<int16_t>(g.nodes[static_cast<size_t>(S.in[1])].index);
    s.in[2] = static_cast<int16_t>(w);
  } else {
    return s;
  }
  s.eps = eps;
  return s;
}

std::vector<Tensor> run_stencil(const Stencil& s, const std::vector<Tensor>& inputs) {
  auto arg = [&](int k) -> const Tensor& { return inputs[static_cast<size_t>(s.in[k])]; };
  switch (s.kind) {
    case StencilKind::rms_norm:
      return {hp::rms_norm(arg(0), arg(1), s.eps)};
    case StencilKind::add_rms_norm: {
      Tensor h = hp::add(arg(0), arg(1));
      Tensor y = hp::rms_norm(h, arg(2), s.eps);
      return {h, y};
    }
    case StencilKind::softmax:
      return {hp::softmax(arg(0), -1)};
    case StencilKind::none:
      break;
  }
  HP_CHECK(false, "run_stencil: no stencil");
  return {};
}

const char* stencil_name(StencilKind k) {
  switch (k) {
    case StencilKind::rms_norm:
      return "rms_norm";
    case StencilKind::add_rms_norm:
      return "add_rms_norm";
    case StencilKind::softmax:
      return "softmax";
    case StencilKind::none:
      break;
  }
  return "none";
}

}  // namespace hp::fusion
