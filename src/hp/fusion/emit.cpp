// Compile, part 3: a stage's items as steps (docs/FUSION.md "Compile" 4-5). Values get their
// location on first read or write in a pass (an L1 slot by linear scan, the block scratch when
// kept, the output tensor when written in place); runs of single-use f32 values are collected into
// chains and emitted as one chain step when the run ends.
#include "hp/fusion/compile_impl.h"

namespace hp::fusion::detail {

using kernels::EwOp;

int16_t Compiler::add_loc(PassState& ps, Loc l) {
  ps.pass->locs.push_back(l);
  return static_cast<int16_t>(ps.pass->locs.size() - 1);
}

int16_t Compiler::new_slot(PassState& ps) {
  int16_t s;
  if (!ps.free_slots.empty()) {
    s = ps.free_slots.back();
    ps.free_slots.pop_back();
  } else {
    s = static_cast<int16_t>(ps.next_slot++);
  }
  prog.num_slots = std::max(prog.num_slots, ps.next_slot);
  return add_loc(ps, {LocKind::slot, Cls::full, s, 4});
}

int16_t Compiler::read(PassState& ps, int32_t v) {
  int16_t& l = ps.loc_of[static_cast<size_t>(v)];
  if (l >= 0) return l;
  const Node& nd = node(v);
  if (nd.kind == NodeKind::input) {
    const Loc src{LocKind::input, cls(v), static_cast<int16_t>(nd.index),
                  static_cast<uint8_t>(dtype_size(nd.dtype))};
    if (nd.dtype == DType::f32) return l = add_loc(ps, src);
    const int16_t from = add_loc(ps, src);
    l = new_slot(ps);
    Step s;
    s.kind = StepKind::load_bf16, s.out = l, s.in[0] = from;
    ps.pass->steps.push_back(s);
    return l;
  }
  if (out_direct[static_cast<size_t>(v)] >= 0)
    return l = add_loc(ps, {LocKind::output, Cls::full,
                            static_cast<int16_t>(out_direct[static_cast<size_t>(v)]), 4});
  HP_CHECK(keep[static_cast<size_t>(v)] >= 0, "value ", v, " read outside its pass but not kept");
  return l = add_loc(
             ps, {LocKind::keep, Cls::full, static_cast<int16_t>(keep[static_cast<size_t>(v)]), 4});
}

int16_t Compiler::write(PassState& ps, int32_t v) {
  int16_t& l = ps.loc_of[static_cast<size_t>(v)];
  if (out_direct[static_cast<size_t>(v)] >= 0 || keep[static_cast<size_t>(v)] >= 0)
    return l = read(ps, v);
  return l = new_slot(ps);
}

void Compiler::release(PassState& ps, int32_t v, int j) {
  if (ps.last[static_cast<size_t>(v)] != j) return;
  if (!ps.chain.empty()) {  // its sources are read when the chain is emitted
    ps.deferred.push_back(v), ps.deferred_at.push_back(j);
    return;
  }
  const int16_t l = ps.loc_of[static_cast<size_t>(v)];
  if (l >= 0 && ps.pass->locs[static_cast<size_t>(l)].kind == LocKind::slot)
    ps.free_slots.push_back(ps.pass->locs[static_cast<size_t>(l)].index);
}

void Compiler::emit_compute(PassState& ps, int32_t i) {
  const Node& nd = node(i);
  Step s;
  s.op = nd.op;
  std::copy(nd.p, nd.p + 3, s.p);
  int nvec = 0;
  int16_t scalar = -1;
  float imm = 0;
  bool scalar_first = false;
  for (int k = 0; k < node_arity(nd); ++k) {
    const int32_t o = rep(nd.in[k]);
    if (vec(o)) {
      s.in[nd.kind == NodeKind::select ? k : nvec] = read(ps, o);
      ++nvec;
      continue;
    }
    const int16_t reg = cls(o) == Cls::col ? col[static_cast<size_t>(o)] : int16_t(-1);
    const float val = a.value[static_cast<size_t>(o)];
    if (nd.kind == NodeKind::select) {  // broadcast the scalar into a slot
      Step f;
      f.kind = StepKind::fill, f.out = new_slot(ps), f.scalar = reg, f.p[3] = val;
      ps.pass->steps.push_back(f);
      s.in[k] = f.out;
      continue;
    }
    scalar = reg, imm = val, scalar_first = k == 0;
  }
  switch (nd.kind) {
    case NodeKind::select:
      s.kind = StepKind::select;
      break;
    case NodeKind::cast:
      s.kind = StepKind::round_bf16;
      break;
    default:
      s.kind = node_arity(nd) == 2 && nvec == 1 ? (scalar_first ? StepKind::ew_sv : StepKind::ew_vs)
                                                : StepKind::ew;
      s.scalar = scalar, s.p[3] = imm;
  }
  // Fill slots of a select are temporaries: free them once the select has read them.
  std::vector<int16_t> temps;
  if (nd.kind == NodeKind::select)
    for (int k = 0; k < 3; ++k)
      if (!vec(rep(nd.in[k]))) temps.push_back(ps.pass->locs[static_cast<size_t>(s.in[k])].index);
  s.out = write(ps, i);
  ps.pass->steps.push_back(s);
  for (int16_t t : temps) ps.free_slots.push_back(t);
  const bool rounds = nd.dtype == DType::bf16 && nd.kind == NodeKind::ew;
  if (rounds) {
    Step r;
    r.kind = StepKind::round_bf16, r.out = r.in[0] = s.out;
    ps.pass->steps.push_back(r);
  }
}

bool Compiler::chain_op(int32_t i) const {
  const Node& nd = node(i);
  // bf16 values too: their ops round in the chain (ChainOp::round).
  return nd.kind == NodeKind::ew && (nd.dtype == DType::f32 || nd.dtype == DType::bf16) &&
         chainable(static_cast<EwOp>(nd.op));
}

int32_t Compiler::other_vec(int32_t i, int32_t acc) const {
  for (int k = 0; k < node_arity(node(i)); ++k) {
    const int32_t o = rep(node(i).in[k]);
    if (vec(o) && o != acc) return o;
  }
  return -1;
}

bool Compiler::stored(const PassState& ps, int32_t u) const {
  int written = 0;
  for (const auto& [v, o] : ps.pending) written += v == u;
  return uses[static_cast<size_t>(u)] - written != 1 || out_direct[static_cast<size_t>(u)] >= 0 ||
         keep[static_cast<size_t>(u)] >= 0;
}

bool Compiler::rides_chain(const PassState& ps, const Item& it) const {
  if (it.kind != ItemKind::store || ps.chain.empty() || ps.chain.back() != it.node) return false;
  if (prog.outputs[static_cast<size_t>(it.out)].dtype != DType::bf16 ||
      node(it.node).dtype != DType::bf16)
    return false;
  return ps.chain_ops + 1 <= kMaxChainOps &&
         ps.sources.size() + ps.pending.size() + 1 <= static_cast<size_t>(kMaxChainSources);
}

int16_t Compiler::chain_read(PassState& ps, int32_t v, uint8_t* bf16) {
  const Node& nd = node(v);
  *bf16 = 0;
  if (nd.kind != NodeKind::input || nd.dtype != DType::bf16 ||
      ps.loc_of[static_cast<size_t>(v)] >= 0)
    return read(ps, v);
  *bf16 = 1;
  return add_loc(ps, {LocKind::input, cls(v), static_cast<int16_t>(nd.index), 2});
}

bool Compiler::extends(const PassState& ps, int32_t i) const {
  if (ps.chain.empty() || !chain_op(i)) return false;
  const int32_t u = ps.chain.back();
  const Node& nd = node(i);
  int refs = 0;
  for (int k = 0; k < node_arity(nd); ++k) refs += rep(nd.in[k]) == u;
  if (refs != 1) return false;
  // A value others read too is stored by the chain as it passes (a store op).
  const int store = stored(ps, u) ? 1 : 0;
  if (ps.chain_ops + 1 + store > kMaxChainOps) return false;
  const int32_t o = other_vec(i, u);
  const int new_src =
      o >= 0 && std::find(ps.sources.begin(), ps.sources.end(), o) == ps.sources.end();
  return static_cast<int>(ps.sources.size() + ps.pending.size()) + new_src + store <=
         kMaxChainSources;
}

void Compiler::chain_ops_of(PassState& ps, int32_t i, int32_t acc) {
  const Node& nd = node(i);
  Pass& pass = *ps.pass;
  ChainOp c{};
  c.op = nd.op;
  c.round = nd.dtype == DType::bf16 ? 1 : 0;
  std::copy(nd.p, nd.p + 3, c.p);
  int16_t reg = -1;
  const int arity = node_arity(nd);
  int acc_pos = -1;  // operand index holding the running value
  if (acc < 0) {     // head: load the first vector operand
    for (int k = 0; k < arity && acc_pos < 0; ++k)
      if (vec(rep(nd.in[k]))) acc_pos = k;
    ChainOp ld{};
    ld.form = ChainForm::load, ld.src = chain_read(ps, rep(nd.in[acc_pos]), &ld.bf16);
    pass.chain.push_back(ld), pass.chain_scalar.push_back(-1);
  } else {
    for (int k = 0; k < arity; ++k)
      if (rep(nd.in[k]) == acc) acc_pos = k;
  }
  if (arity == 1) {
    c.form = ChainForm::unary;
  } else {
    const int32_t o = rep(nd.in[1 - acc_pos]);
    if (vec(o)) {
      c.form = acc_pos == 0 ? ChainForm::acc_v : ChainForm::v_acc;
      c.src = chain_read(ps, o, &c.bf16);
    } else {
      c.form = acc_pos == 0 ? ChainForm::acc_s : ChainForm::s_acc;
      c.s = a.value[static_cast<size_t>(o)];
      if (cls(o) == Cls::col) reg = col[static_cast<size_t>(o)];
    }
  }
  pass.chain.push_back(c), pass.chain_scalar.push_back(reg);
}

void Compiler::close_chain(PassState& ps) {
  if (ps.chain.empty()) return;
  std::vector<int32_t> nodes;
  nodes.swap(ps.chain);
  std::vector<std::pair<int32_t, int32_t>> pending;
  pending.swap(ps.pending);
  // One f32 op: the eager kernel itself. With bf16 inputs or outputs, one chain reads and writes
  // them in memory (no widening / narrowing passes).
  const bool bf16_io = !pending.empty() || node(nodes[0]).dtype == DType::bf16;
  if (nodes.size() == 1 && !bf16_io) {
    emit_compute(ps, nodes[0]);
  } else {
    Step s;
    s.kind = StepKind::chain;
    s.acc = static_cast<int16_t>(ps.pass->chain.size());
    ps.pending = pending;  // stored() discounts the bf16 outputs written below
    for (size_t k = 0; k < nodes.size(); ++k) {
      chain_ops_of(ps, nodes[k], k ? nodes[k - 1] : -1);
      for (const auto& [v, o] : pending) {
        if (v != nodes[k]) continue;
        ChainOp st{};
        st.form = ChainForm::store, st.bf16 = 1;
        st.src = add_loc(ps, {LocKind::output, Cls::full, static_cast<int16_t>(o), 2});
        ps.pass->chain.push_back(st), ps.pass->chain_scalar.push_back(-1);
      }
      if (k + 1 < nodes.size() && stored(ps, nodes[k])) {
        ChainOp st{};
        st.form = ChainForm::store, st.src = write(ps, nodes[k]);
        ps.pass->chain.push_back(st), ps.pass->chain_scalar.push_back(-1);
      }
    }
    s.count = static_cast<int16_t>(ps.pass->chain.size() - static_cast<size_t>(s.acc));
    // No f32 value when the bf16 outputs were its only readers.
    int written = 0;
    for (const auto& [v, o] : pending) written += v == nodes.back();
    const size_t last = static_cast<size_t>(nodes.back());
    const bool needed = uses[last] - written > 0 || out_direct[last] >= 0 || keep[last] >= 0;
    s.out = needed ? write(ps, nodes.back()) : int16_t(-1);
    ps.pass->steps.push_back(s);
    ps.pending.clear();
  }
  ps.sources.clear();
  ps.chain_ops = 0;
  for (size_t k = 0; k < ps.deferred.size(); ++k) release(ps, ps.deferred[k], ps.deferred_at[k]);
  ps.deferred.clear(), ps.deferred_at.clear();
}

void Compiler::emit_stage(size_t si) {
  std::vector<Item>& st = items[si];
  size_t j = 0;
  while (j < st.size() || (j == 0 && st.empty())) {
    Pass pass;
    PassState ps;
    ps.pass = &pass;
    ps.loc_of.assign(g.nodes.size(), -1);
    ps.last.assign(g.nodes.size(), -1);
    const int pid = st.empty() ? -1 : st[j].pass;
    size_t end = j;
    while (end < st.size() && st[end].pass == pid) {
      int32_t ops[3];
      for (int k = operands(st[end], ops); k-- > 0;)
        ps.last[static_cast<size_t>(ops[k])] = static_cast<int>(end);
      ++end;
    }
    for (; j < end; ++j) {
      const Item& it = st[j];
      if (it.kind == ItemKind::compute && extends(ps, it.node)) {
        const int32_t u = ps.chain.back();
        add_source(ps, other_vec(it.node, u));
        if (stored(ps, u)) add_source(ps, u), ++ps.chain_ops;
        ++ps.chain_ops;
        ps.chain.push_back(it.node);
      } else if (it.kind == ItemKind::compute && chain_op(it.node)) {
        close_chain(ps);
        ps.chain.push_back(it.node);
        ps.chain_ops = 2;  // load + op
        for (int k = 0; k < node_arity(node(it.node)); ++k)
          if (vec(rep(node(it.node).in[k]))) add_source(ps, rep(node(it.node).in[k]));
      } else if (it.kind == ItemKind::compute) {
        close_chain(ps);
        emit_compute(ps, it.node);
      } else if (rides_chain(ps, it)) {
        ps.pending.emplace_back(it.node, it.out);
        ++ps.chain_ops;
      } else if (it.kind == ItemKind::reduce) {
        close_chain(ps);
        Step s;
        s.kind = StepKind::reduce, s.op = node(it.node).op,
        s.out = col[static_cast<size_t>(it.node)];
        s.in[0] = read(ps, rep(node(it.node).in[0]));
        s.acc = static_cast<int16_t>(pass.num_acc++);
        pass.steps.push_back(s);
      } else if (it.kind == ItemKind::row_sum) {
        close_chain(ps);
        Step s;
        s.kind = StepKind::row_sum;
        s.in[0] = read(ps, rep(node(it.node).in[0]));
        s.acc = prog.outputs[static_cast<size_t>(it.out)].row_sum;
        pass.steps.push_back(s);
      } else {
        close_chain(ps);
        const OutputSpec& o = prog.outputs[static_cast<size_t>(it.out)];
        Step s;
        s.kind = o.dtype == DType::bf16 ? StepKind::store_bf16 : StepKind::copy;
        s.in[0] = read(ps, it.node);
        s.out = add_loc(ps, {LocKind::output, Cls::full, static_cast<int16_t>(it.out),
                             static_cast<uint8_t>(dtype_size(o.dtype))});
        pass.steps.push_back(s);
      }
      int32_t ops[3];
      for (int k = operands(it, ops); k-- > 0;) release(ps, ops[k], static_cast<int>(j));
    }
    close_chain(ps);
    // Tiles shrink as streams grow, so every stream of the pass stays in L1.
    const int64_t streams = std::max<int64_t>(1, static_cast<int64_t>(pass.locs.size()));
    pass.tile = std::clamp<int64_t>(kL1Bytes / (4 * streams) / 64 * 64, kTileMin, kTileMax);
    prog.num_acc = std::max(prog.num_acc, pass.num_acc);
    prog.num_steps += static_cast<int>(pass.steps.size());
    prog.stages[si].passes.push_back(std::move(pass));
    if (st.empty()) break;
  }
}

}  // namespace hp::fusion::detail
