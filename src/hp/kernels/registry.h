// The one kernel seam: every kernel family's table of the backend in use, from one lookup.
//
// A family is one table type: EwTable, NormTable<float>, SoftmaxRowFns<float> (kernels/cpu),
// detail::AttentionKernels, RopeTable, GateTopKTable (kernels/cpu), and from the layers above,
// fusion::RoutineTable, mx::detail::Kernels, optim::AdamWTable. The family's header declares its
// entries with HP_KERNEL_FAMILY(Table), one per ISA; each ISA translation unit defines its own,
// isa_table<Table, Isa::x>() (HP_KERNEL_ENTRY), returning its table (static storage) or null where
// the family has no kernels of that ISA. kernel_table<Table>() is the only dispatch: the active
// backend's entry, or, where that is null, the next lower ISA's (avx512 → avx2 → scalar; a scalar
// entry is never null). A family that needs part of a lower ISA's table registers that table
// explicitly (gate top-k on AVX-512: AVX2's selection, no fused sigmoid pass). Families of higher
// layers declare and define their entries from their own layer; this header knows none of them.
//
// Device axis: Backend names the device beside the ISA (the CPU only, today). A second device
// adds a Device value, a device_table<Table, Device::x>() its backend's translation units define
// the same way, and a branch on b.device at the top of kernel_table(Backend); callers, which all
// reach kernels through kernel_table, stay as they are.
#pragma once

#include "hp/kernels/cpu/isa.h"

namespace hp::kernels {

enum class Device { cpu };

struct Backend {
  Isa isa = Isa::scalar;
  Device device = Device::cpu;
};

// The CPU at the active ISA (HP_ISA, set_active_isa, else the CPU's best).
inline Backend active_backend() {
  return {active_isa(), Device::cpu};
}

// One (family, ISA) entry; defined by that ISA's translation unit of the family only, with
// HP_KERNEL_ENTRY.
template <class Table, Isa I>
const Table* isa_table();

// Declares a family's three entries (in namespace hp::kernels): every translation unit that looks
// the family up sees that they are defined elsewhere.
#define HP_KERNEL_FAMILY(Table)                                \
  template <>                                                  \
  const Table* isa_table<Table, ::hp::kernels::Isa::scalar>(); \
  template <>                                                  \
  const Table* isa_table<Table, ::hp::kernels::Isa::avx2>();   \
  template <>                                                  \
  const Table* isa_table<Table, ::hp::kernels::Isa::avx512>()

// Defines, at global scope of an ISA translation unit (which defines HP_ISA to its ISA's name),
// the entry of family Table: the address of the table object given (static storage), e.g.
// HP_KERNEL_ENTRY(hp::kernels::EwTable, HP_ISA::table());
#define HP_KERNEL_ENTRY(Table, ...)                                        \
  template <>                                                              \
  const Table* hp::kernels::isa_table<Table, hp::kernels::Isa::HP_ISA>() { \
    return &(__VA_ARGS__);                                                 \
  }

namespace detail {

template <class Table>
const Table* isa_entry(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return isa_table<Table, Isa::avx512>();
    case Isa::avx2:
      return isa_table<Table, Isa::avx2>();
    case Isa::scalar:
      break;
  }
  return isa_table<Table, Isa::scalar>();
}

constexpr Isa next_lower(Isa isa) {
  return isa == Isa::avx512 ? Isa::avx2 : Isa::scalar;
}

}  // namespace detail

// The family's table for backend b: its ISA's entry, else the nearest lower ISA's that exists.
template <class Table>
const Table& kernel_table(Backend b) {
  for (Isa isa = b.isa; isa != Isa::scalar; isa = detail::next_lower(isa))
    if (const Table* t = detail::isa_entry<Table>(isa)) return *t;
  return *isa_table<Table, Isa::scalar>();
}

template <class Table>
const Table& kernel_table() {
  return kernel_table<Table>(active_backend());
}

}  // namespace hp::kernels
