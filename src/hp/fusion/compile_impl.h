// Compile, part 2 (compile.cpp: clusters, split, placement; emit.cpp: locations, steps, chains):
// the state of one compilation. Internal to the fusion engine.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "hp/fusion/classify.h"

namespace hp::fusion::detail {

enum class ItemKind : uint8_t { compute, reduce, store, row_sum };
// One unit of a stage's work, in node order.
struct Item {
  ItemKind kind;
  int32_t node;      // compute / reduce / row_sum: the node; store: the output's value (rep)
  int32_t out = -1;  // store, row_sum: the output index
  int pass = 0;      // global pass index, set by the split
};

struct Compiler {
  const Graph& g;
  const Analysis& a;
  Program prog;
  std::vector<int16_t> col;     // col register per node (rep nodes)
  std::vector<int> out_direct;  // output index a node writes into directly, or -1
  std::vector<int> keep;        // keep buffer per node, or -1
  std::vector<int> made_in;     // global pass that produces a value
  std::vector<int> uses;        // operand references + outputs, per value (rep)

  Compiler(const Graph& gr, const Analysis& an) : g(gr), a(an) {}

  const Node& node(int32_t i) const { return g.nodes[static_cast<size_t>(i)]; }
  int32_t rep(int32_t i) const { return a.rep[static_cast<size_t>(i)]; }
  Cls cls(int32_t i) const { return a.cls[static_cast<size_t>(i)]; }
  bool vec(int32_t i) const { return cls(i) == Cls::full || cls(i) == Cls::row; }

  int16_t new_col() { return static_cast<int16_t>(prog.num_cols++); }

  // ---- col (per-row) values ----
  std::vector<ColStep>& col_list(int level) {
    return level < a.num_stages ? prog.stages[static_cast<size_t>(level)].before : prog.after;
  }

  void emit_col(int32_t i);

  // ---- items of the stages ----
  std::vector<std::vector<Item>> items;  // per stage

  void collect_items();

  // The vector values an item reads.
  int operands(const Item& it, int32_t* out) const;

  // ---- split: greedy passes of at most kMaxStreams tile streams ----
  void split(std::vector<int>* stage_passes);

  // ---- locations and steps ----
  void place_values();

  struct PassState {
    Pass* pass;
    std::vector<int16_t> loc_of;  // per node: Loc index in this pass, or -1
    std::vector<int> last;        // per node: last item (index in stage) reading it in this pass
    std::vector<int16_t> free_slots;
    int next_slot = 0;
    std::vector<int32_t> chain;     // the open chain's nodes (not yet emitted)
    std::vector<int32_t> sources;   // its distinct vector sources and stored values
    int chain_ops = 0;              // ops of the open chain (load and stores included)
    std::vector<int32_t> deferred;  // releases waiting for the chain to be emitted
    std::vector<int> deferred_at;
    // bf16 outputs the open chain writes itself as its values pass (node, output index), instead
    // of a narrowing store pass after it.
    std::vector<std::pair<int32_t, int32_t>> pending;
  };

  int16_t add_loc(PassState& ps, Loc l);
  int16_t new_slot(PassState& ps);

  // Loc of a vector value for reading in this pass (loads bf16 inputs on first use).
  int16_t read(PassState& ps, int32_t v);

  // Loc a computed value is written to.
  int16_t write(PassState& ps, int32_t v);

  void release(PassState& ps, int32_t v, int j);

  void emit_compute(PassState& ps, int32_t i);

  // ---- chains: runs of single-use f32 values computed in registers (routines.h) ----
  bool chain_op(int32_t i) const;

  // The vector operand of i other than `acc` (-1 if none).
  int32_t other_vec(int32_t i, int32_t acc) const;

  bool extends(const PassState& ps, int32_t i) const;
  // Whether chain node u's value is read outside the chain as f32 (then the chain stores it):
  // readers other than the next chain op and the bf16 outputs the chain writes (ps.pending).
  bool stored(const PassState& ps, int32_t u) const;
  // Whether the store item `it` can ride on the open chain (a bf16 output of its last value).
  bool rides_chain(const PassState& ps, const Item& it) const;
  // The source of a chain op reading value v: a bf16 input straight from memory (*bf16 = 1), else
  // read(ps, v).
  int16_t chain_read(PassState& ps, int32_t v, uint8_t* bf16);

  void add_source(PassState& ps, int32_t o) {
    if (o >= 0 && std::find(ps.sources.begin(), ps.sources.end(), o) == ps.sources.end())
      ps.sources.push_back(o);
  }

  // The chain op applying node i to the running value acc (acc < 0: i heads the chain).
  void chain_ops_of(PassState& ps, int32_t i, int32_t acc);

  void close_chain(PassState& ps);

  void emit_stage(size_t si);

  std::shared_ptr<const Program> build();
};

}  // namespace hp::fusion::detail
