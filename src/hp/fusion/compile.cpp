// Compile, part 2: cluster, split and place (docs/FUSION.md "Compile" 2-4; steps: emit.cpp).
//
// Each stage (the values between two reductions) becomes one cluster; its work is a list of items
// in node order: compute a full/row value, feed a reduction, store an output. The items are split
// into passes so that no pass streams more than kMaxStreams tiles; a value produced in one pass and
// read in a later one (or a later stage) is kept in the block scratch, everything else lives in an
// L1 tile slot from its producing step to its last use. Per-row values (reductions and what is
// computed from them) become col registers, computed between stages.
#include <algorithm>

#include "hp/fusion/compile_impl.h"

namespace hp::fusion {
namespace detail {

void Compiler::emit_col(int32_t i) {
  const Node& nd = node(i);
  std::vector<ColStep>& list = col_list(a.level[static_cast<size_t>(i)]);
  ColStep s;
  s.out = col[static_cast<size_t>(i)];
  auto operand = [&](int k, int slot) -> bool {  // true when in[slot] is a register
    const int32_t o = rep(nd.in[k]);
    if (cls(o) == Cls::scalar) {
      s.p[3] = a.value[static_cast<size_t>(o)];
      return false;
    }
    s.in[slot] = col[static_cast<size_t>(o)];
    return true;
  };
  switch (nd.kind) {
    case NodeKind::input:
      s.kind = ColKind::load_input, s.in[0] = static_cast<int16_t>(nd.index);
      s.p[0] = a.uniform[static_cast<size_t>(i)] ? 1.0f : 0.0f;
      list.push_back(s);
      return;
    case NodeKind::reduce:
      if (nd.dtype != DType::bf16) return;  // its value comes from the pass
      s.kind = ColKind::round_bf16, s.in[0] = s.out;
      list.push_back(s);
      return;
    case NodeKind::cast:  // to bf16 (widening casts alias their operand)
      s.kind = ColKind::round_bf16, operand(0, 0);
      list.push_back(s);
      return;
    case NodeKind::select:
      s.kind = ColKind::select;
      for (int k = 0; k < 3; ++k) {
        if (operand(k, k)) continue;
        ColStep f;
        f.kind = ColKind::fill, f.out = new_col(), f.p[3] = s.p[3];
        list.push_back(f);
        s.in[k] = f.out;
      }
      list.push_back(s);
      return;
    default:
      break;
  }
  std::copy(nd.p, nd.p + 3, s.p);
  s.op = nd.op;
  if (node_arity(nd) == 1) {
    s.kind = ColKind::ew, operand(0, 0);
  } else {
    const bool r0 = operand(0, 0);
    const bool r1 = operand(1, r0 ? 1 : 0);
    s.kind = r0 && r1 ? ColKind::ew : r0 ? ColKind::ew_vs : ColKind::ew_sv;
  }
  list.push_back(s);
  if (nd.dtype == DType::bf16) {
    ColStep r;
    r.kind = ColKind::round_bf16, r.out = r.in[0] = s.out;
    list.push_back(r);
  }
}

void Compiler::collect_items() {
  items.assign(static_cast<size_t>(a.num_stages), {});
  std::vector<uint8_t> direct_taken(g.nodes.size(), 0);
  out_direct.assign(g.nodes.size(), -1);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int32_t o = g.outputs[k];
    if (cls(o) != Cls::full || rep(o) != o || node(o).kind == NodeKind::input ||
        node(o).dtype != DType::f32 || direct_taken[static_cast<size_t>(o)])
      continue;
    direct_taken[static_cast<size_t>(o)] = 1;
    out_direct[static_cast<size_t>(o)] = static_cast<int>(k);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!a.live[i]) continue;
    const int32_t id = static_cast<int32_t>(i);
    const Node& nd = g.nodes[i];
    if (nd.kind == NodeKind::reduce) {
      const int32_t x = rep(nd.in[0]);
      items[static_cast<size_t>(a.level[static_cast<size_t>(x)])].push_back({ItemKind::reduce, id});
    } else if (nd.kind == NodeKind::row_sum) {
      for (size_t k = 0; k < g.outputs.size(); ++k)
        if (g.outputs[k] == id)
          items[static_cast<size_t>(a.level[i])].push_back(
              {ItemKind::row_sum, id, static_cast<int32_t>(k)});
    } else if (vec(id) && rep(id) == id && nd.kind != NodeKind::input) {
      items[static_cast<size_t>(a.level[i])].push_back({ItemKind::compute, id});
    }
    for (size_t k = 0; k < g.outputs.size(); ++k)
      if (g.outputs[k] == id && cls(id) == Cls::full && out_direct[i] != static_cast<int>(k))
        items[static_cast<size_t>(a.level[i])].push_back(
            {ItemKind::store, rep(id), static_cast<int32_t>(k)});
  }
}

int Compiler::operands(const Item& it, int32_t* out) const {
  if (it.kind != ItemKind::compute) {
    const bool reads_operand = it.kind == ItemKind::reduce || it.kind == ItemKind::row_sum;
    out[0] = reads_operand ? rep(node(it.node).in[0]) : it.node;
    return 1;
  }
  int k = 0;
  for (int j = 0; j < node_arity(node(it.node)); ++j) {
    const int32_t o = rep(node(it.node).in[j]);
    if (vec(o)) out[k++] = o;
  }
  return k;
}

void Compiler::split(std::vector<int>* stage_passes) {
  int pass = 0;
  std::vector<int> last_use(g.nodes.size(), -1);
  for (auto& st : items) {
    for (size_t j = 0; j < st.size(); ++j) {
      int32_t ops[3];
      for (int k = operands(st[j], ops); k-- > 0;)
        last_use[static_cast<size_t>(ops[k])] = static_cast<int>(j);
    }
    int streams = 0;
    std::vector<int32_t> seen;
    int count = 1;
    for (size_t j = 0; j < st.size(); ++j) {
      int32_t ops[3];
      const int nops = operands(st[j], ops);
      int add = st[j].kind == ItemKind::reduce ? 0 : 1;
      for (int k = 0; k < nops; ++k)
        if (std::find(seen.begin(), seen.end(), ops[k]) == seen.end()) ++add;
      if (streams + add > kMaxStreams && j > 0 && streams > 0) {
        ++pass, ++count;
        streams = 0;
        seen.clear();
        add = (st[j].kind == ItemKind::reduce ? 0 : 1) + nops;
      }
      for (int k = 0; k < nops; ++k)
        if (std::find(seen.begin(), seen.end(), ops[k]) == seen.end()) seen.push_back(ops[k]);
      if (st[j].kind == ItemKind::compute) seen.push_back(st[j].node);
      streams += add;
      st[j].pass = pass;
    }
    stage_passes->push_back(count);
    ++pass;
  }
  prog.num_passes = pass;
}

void Compiler::place_values() {
  made_in.assign(g.nodes.size(), -1);
  keep.assign(g.nodes.size(), -1);
  std::vector<int> used_until(g.nodes.size(), -1);
  for (auto& st : items)
    for (const Item& it : st) {
      if (it.kind == ItemKind::compute) made_in[static_cast<size_t>(it.node)] = it.pass;
      int32_t ops[3];
      for (int k = operands(it, ops); k-- > 0;)
        used_until[static_cast<size_t>(ops[k])] =
            std::max(used_until[static_cast<size_t>(ops[k])], it.pass);
    }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (made_in[i] >= 0 && used_until[i] > made_in[i] && out_direct[i] < 0)
      keep[i] = prog.num_keeps++;
}

std::shared_ptr<const Program> Compiler::build() {
  prog.M = a.M, prog.N = a.N;
  prog.stages.resize(static_cast<size_t>(a.num_stages));
  prog.input_cls.assign(static_cast<size_t>(g.num_inputs), Cls::full);
  prog.input_dtype.assign(static_cast<size_t>(g.num_inputs), DType::f32);
  col.assign(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    if (nd.kind == NodeKind::input) {
      prog.input_cls[static_cast<size_t>(nd.index)] = a.live[i] ? a.cls[i] : Cls::scalar;
      prog.input_dtype[static_cast<size_t>(nd.index)] = nd.dtype;
    }
    if (a.live[i] && a.cls[i] == Cls::col && a.rep[i] == static_cast<int32_t>(i)) {
      col[i] = new_col();
      emit_col(static_cast<int32_t>(i));
    }
  }
  for (int32_t o : g.outputs) {
    OutputSpec s;
    s.shape = node(o).shape.shape();
    s.dtype = node(o).dtype;
    s.cls = cls(o);
    if (s.cls == Cls::col) s.col = col[static_cast<size_t>(rep(o))];
    if (node(o).kind == NodeKind::row_sum) s.row_sum = static_cast<int16_t>(prog.num_row_sums++);
    prog.outputs.push_back(s);
  }
  uses.assign(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (a.live[i])
      for (int k = 0; k < node_arity(g.nodes[i]); ++k)
        ++uses[static_cast<size_t>(rep(g.nodes[i].in[k]))];
  for (int32_t o : g.outputs) ++uses[static_cast<size_t>(rep(o))];
  collect_items();
  std::vector<int> stage_passes;
  split(&stage_passes);
  place_values();
  for (size_t si = 0; si < items.size(); ++si) emit_stage(si);
  // Blocks: whole rows when reducing (a row's reduction is one thread's, in order).
  if (a.has_reduce || prog.N <= kBlockElems) {
    prog.cols_per_block = prog.N;
    prog.rows_per_block = std::max<int64_t>(1, kBlockElems / prog.N);
  } else {
    prog.cols_per_block = kBlockElems;  // a multiple of kTileMax
    prog.rows_per_block = 1;
  }
  // A pass of one step and no L1 slot streams memory to memory: its tile bounds no working set, so
  // it takes the block's row in one call. Per 1024-element tile, the composed SiLU on 64 MiB (one
  // `ew silu` step) ran 1.10-1.14x the same kernel called per tile by a plain loop (1 thread).
  const int64_t row = (prog.cols_per_block + 63) / 64 * 64;
  for (Stage& st : prog.stages)
    for (Pass& ps : st.passes)
      if (ps.steps.size() == 1 &&
          std::none_of(ps.locs.begin(), ps.locs.end(),
                       [](const Loc& l) { return l.kind == LocKind::slot; }))
        ps.tile = std::max(ps.tile, row);
  return std::make_shared<const Program>(std::move(prog));
}

}  // namespace detail

std::shared_ptr<const Program> compile(const Graph& g, std::string* why) {
  Analysis a;
  if (!classify(g, &a, why)) return nullptr;
  return detail::Compiler(g, a).build();
}

}  // namespace hp::fusion
