// The DVM fusion IR: a small graph of vector ops over the elementwise functors of
// kernels/cpu/ew_ops.h (docs/FUSION.md, docs/ARCHITECTURE.md §5).
//
// A Graph is built by tracing a function written against `Var` (fusion/builder.h): every node is
// appended in creation order, so node ids are already a topological order. Nodes carry their
// numpy-broadcast shape and dtype (f32 or bf16 values, computed in f32; a bf16 node's value is
// rounded to bf16, exactly as the eager op would store it). The structure hash covers kinds, ops,
// operands, parameters, shapes and dtypes, so it doubles as the cache key of the compiled program.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/kernels/cpu/ew_ops.h"

namespace hp::fusion {

// A shape stored inline (tracing must not allocate per node). Right-aligned numpy semantics.
inline constexpr int kMaxDims = 8;
struct Dims {
  int8_t n = 0;
  int64_t d[kMaxDims] = {};

  static Dims of(const Shape& s, const char* what);
  Shape shape() const { return Shape(d, d + n); }
  int64_t numel() const;
  int64_t last() const { return n ? d[n - 1] : 1; }
  bool operator==(const Dims& o) const;
};
std::string dims_str(const Dims& d);
// numpy broadcast of a and b; false when they are incompatible.
bool broadcast_dims(const Dims& a, const Dims& b, Dims* out);

enum class NodeKind : uint8_t {
  input,     // index = argument number
  constant,  // p[0] = value, already rounded to dtype
  ew,        // op = EwOp, in[0..arity), p = the functor's parameters
  select,    // in[0] != 0 ? in[1] : in[2]
  cast,      // in[0] converted to dtype (f32 <-> bf16)
  reduce,    // op = RedOp over the last dim, keepdim: [..., n] -> [..., 1]
  opaque,    // index = Graph::opaque entry: an op the engine does not know (runs eagerly)
  row_sum,   // in[0] summed over every dim but the last: [..., n] -> [1, …, 1, n] (outputs only)
};
enum class RedOp : uint8_t { sum, max };

struct Node {
  NodeKind kind = NodeKind::input;
  uint8_t op = 0;
  DType dtype = DType::f32;
  int32_t in[3] = {-1, -1, -1};
  float p[3] = {0, 0, 0};
  int32_t index = 0;
  Dims shape;
};

// An op outside the IR: its eager function and a name for the structure hash and log lines.
struct Opaque {
  std::string name;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

struct Graph {
  std::vector<Node> nodes;       // topological (creation) order
  std::vector<int32_t> outputs;  // node ids, in the traced function's return order
  std::vector<Opaque> opaque;
  int32_t num_inputs = 0;

  int32_t add(const Node& n) {
    nodes.push_back(n);
    return static_cast<int32_t>(nodes.size() - 1);
  }
  void clear();
  // Structural hash: kinds, ops, operands, parameters (bitwise), shapes, dtypes, outputs and the
  // names of opaque ops.
  uint64_t hash() const;
  bool same_structure(const Graph& o) const;
};

// Arity of a node (0 for inputs and constants).
int node_arity(const Node& n);
// "exp", "add", "select", "cast", "sum", … (log lines and errors).
std::string node_name(const Graph& g, const Node& n);

}  // namespace hp::fusion
