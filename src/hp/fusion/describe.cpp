// A readable listing of a compiled program (tests, debugging, docs/FUSION.md examples).
#include <sstream>

#include "hp/fusion/program.h"

namespace hp::fusion {

namespace {

const char* step_name(StepKind k) {
  switch (k) {
    case StepKind::ew:
      return "ew";
    case StepKind::ew_vs:
      return "ew_vs";
    case StepKind::ew_sv:
      return "ew_sv";
    case StepKind::select:
      return "select";
    case StepKind::fill:
      return "fill";
    case StepKind::load_bf16:
      return "load_bf16";
    case StepKind::round_bf16:
      return "round_bf16";
    case StepKind::copy:
      return "copy";
    case StepKind::store_bf16:
      return "store_bf16";
    case StepKind::reduce:
      return "reduce";
    case StepKind::chain:
      return "chain";
    case StepKind::row_sum:
      return "row_sum";
  }
  return "?";
}

const char* loc_name(LocKind k) {
  switch (k) {
    case LocKind::slot:
      return "slot";
    case LocKind::input:
      return "in";
    case LocKind::keep:
      return "keep";
    case LocKind::output:
      return "out";
  }
  return "?";
}

}  // namespace

std::string describe(const Program& p) {
  std::ostringstream os;
  if (p.stencil.kind != StencilKind::none) {
    os << "stencil " << stencil_name(p.stencil.kind) << " (hand kernel), eps " << p.stencil.eps
       << "\n";
    return os.str();
  }
  os << "domain [" << p.M << ", " << p.N << "], blocks " << p.rows_per_block << " x "
     << p.cols_per_block << ", slots " << p.num_slots << ", keeps " << p.num_keeps << ", cols "
     << p.num_cols << "\n";
  auto loc = [&](const Pass& ps, int i) {
    const Loc& l = ps.locs[static_cast<size_t>(i)];
    return std::string(loc_name(l.kind)) + std::to_string(l.index);
  };
  for (size_t s = 0; s < p.stages.size(); ++s) {
    os << "stage " << s << ": " << p.stages[s].before.size() << " col steps before\n";
    for (const Pass& ps : p.stages[s].passes) {
      os << "  pass (tile " << ps.tile << ")\n";
      for (const Step& st : ps.steps) {
        os << "    " << step_name(st.kind);
        if (st.kind == StepKind::row_sum) {
          os << " partial" << st.acc << " += " << loc(ps, st.in[0]) << "\n";
          continue;
        }
        if (st.kind == StepKind::reduce) {
          os << " col" << st.out << " <- " << loc(ps, st.in[0]) << "\n";
          continue;
        }
        if (st.kind == StepKind::ew || st.kind == StepKind::ew_vs || st.kind == StepKind::ew_sv)
          os << " " << kernels::ew_name(static_cast<kernels::EwOp>(st.op));
        os << " " << (st.out >= 0 ? loc(ps, st.out) : std::string("-"));
        if (st.kind != StepKind::chain) os << " <- " << loc(ps, st.in[0]);
        if (st.kind == StepKind::chain) {
          os << " [";
          for (int k = 0; k < st.count; ++k) {
            const ChainOp& c = ps.chain[static_cast<size_t>(st.acc + k)];
            os << (k ? ", " : "");
            const char* wide = c.bf16 ? "_bf16 " : " ";
            if (c.form == ChainForm::load)
              os << "load" << wide << loc(ps, c.src);
            else if (c.form == ChainForm::store)
              os << "store" << wide << loc(ps, c.src);
            else
              os << kernels::ew_name(static_cast<kernels::EwOp>(c.op));
          }
          os << "]";
        }
        os << "\n";
      }
    }
  }
  os << "after: " << p.after.size() << " col steps\n";
  return os.str();
}

}  // namespace hp::fusion
