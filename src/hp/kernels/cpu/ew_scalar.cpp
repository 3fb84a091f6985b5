#define HP_ISA scalar
#include "hp/kernels/cpu/ew_impl.h"

namespace hp::kernels {
namespace {

template <class Op, int Arity>
void run_f64(double* out, const double* const* in, int64_t n, const float* p) {
  using A = ScalarArch<double>;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (Arity == 1) out[i] = Op::template apply<A>(in[0][i], p);
    else out[i] = Op::template apply<A>(in[0][i], in[1][i], p);
  }
}

}  // namespace

const EwF64Fn* ew_table_f64() {
  static const EwF64Fn t[kNumEwOps] = {
#define HP_EW_ENTRY(e, F, arity) &run_f64<ew::F, arity>,
      HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
  };
  return t;
}

}  // namespace hp::kernels

HP_KERNEL_ENTRY(hp::kernels::EwTable, HP_ISA::table());
