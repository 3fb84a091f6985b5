#include "hp/fusion/ir.h"

#include <cstring>

namespace hp::fusion {

Dims Dims::of(const Shape& s, const char* what) {
  if (s.size() > static_cast<size_t>(kMaxDims))
    HP_THROW(ValueError, "fusion", what, " has ", s.size(), " dims ", shape_str(s), "; at most ",
             kMaxDims, " are supported");
  Dims r;
  r.n = static_cast<int8_t>(s.size());
  for (size_t i = 0; i < s.size(); ++i) r.d[i] = s[i];
  return r;
}

int64_t Dims::numel() const {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= d[i];
  return p;
}

bool Dims::operator==(const Dims& o) const {
  if (n != o.n) return false;
  for (int i = 0; i < n; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

std::string dims_str(const Dims& d) {
  return shape_str(d.shape());
}

bool broadcast_dims(const Dims& a, const Dims& b, Dims* out) {
  const int n = a.n > b.n ? a.n : b.n;
  Dims r;
  r.n = static_cast<int8_t>(n);
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.n), ib = i - (n - b.n);
    const int64_t da = ia < 0 ? 1 : a.d[ia], db = ib < 0 ? 1 : b.d[ib];
    if (da != db && da != 1 && db != 1) return false;
    r.d[i] = da == 1 ? db : da;
  }
  *out = r;
  return true;
}

void Graph::clear() {
  nodes.clear();
  outputs.clear();
  opaque.clear();
  num_inputs = 0;
}

namespace {

// Word-wise multiply-xorshift over explicit fields (no struct padding is ever hashed): a few
// nanoseconds per node, since the hash is taken on every call of a fused region.
struct Hasher {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  void put(uint64_t w) {
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
};

uint64_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint64_t u32(int32_t v) {
  return static_cast<uint32_t>(v);
}

bool same_node(const Node& a, const Node& b) {
  return a.kind == b.kind && a.op == b.op && a.dtype == b.dtype && a.index == b.index &&
         std::memcmp(a.in, b.in, sizeof a.in) == 0 && std::memcmp(a.p, b.p, sizeof a.p) == 0 &&
         a.shape == b.shape;
}

}  // namespace

uint64_t Graph::hash() const {
  Hasher h;
  h.put(u32(num_inputs));
  for (const Node& n : nodes) {
    h.put(static_cast<uint64_t>(n.kind) | static_cast<uint64_t>(n.op) << 8 |
          static_cast<uint64_t>(n.dtype) << 16 |
          static_cast<uint64_t>(static_cast<uint8_t>(n.shape.n)) << 24 | u32(n.index) << 32);
    h.put(u32(n.in[0]) | u32(n.in[1]) << 32);
    h.put(u32(n.in[2]) | bits(n.p[0]) << 32);
    h.put(bits(n.p[1]) | bits(n.p[2]) << 32);
    for (int k = 0; k < n.shape.n; ++k) h.put(static_cast<uint64_t>(n.shape.d[k]));
  }
  for (int32_t o : outputs) h.put(u32(o));
  for (const Opaque& op : opaque)
    for (char c : op.name) h.put(static_cast<uint8_t>(c));
  return h.h;
}

bool Graph::same_structure(const Graph& o) const {
  if (num_inputs != o.num_inputs || nodes.size() != o.nodes.size() || outputs != o.outputs ||
      opaque.size() != o.opaque.size())
    return false;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!same_node(nodes[i], o.nodes[i])) return false;
  for (size_t i = 0; i < opaque.size(); ++i)
    if (opaque[i].name != o.opaque[i].name) return false;
  return true;
}

int node_arity(const Node& n) {
  switch (n.kind) {
    case NodeKind::input:
    case NodeKind::constant:
      return 0;
    case NodeKind::ew:
      return kernels::ew_arity(static_cast<kernels::EwOp>(n.op));
    case NodeKind::select:
      return 3;
    case NodeKind::cast:
    case NodeKind::reduce:
    case NodeKind::row_sum:
      return 1;
    case NodeKind::opaque: {
      int k = 0;
      while (k < 3 && n.in[k] >= 0) ++k;
      return k;
    }
  }
  return 0;
}

std::string node_name(const Graph& g, const Node& n) {
  switch (n.kind) {
    case NodeKind::input:
      return "input";
    case NodeKind::constant:
      return "constant";
    case NodeKind::ew:
      return kernels::ew_name(static_cast<kernels::EwOp>(n.op));
    case NodeKind::select:
      return "where";
    case NodeKind::cast:
      return "cast";
    case NodeKind::reduce:
      return static_cast<RedOp>(n.op) == RedOp::sum ? "sum" : "amax";
    case NodeKind::opaque:
      return g.opaque[static_cast<size_t>(n.index)].name;
    case NodeKind::row_sum:
      return "sum_rows";
  }
  return "?";
}

}  // namespace hp::fusion
