// The one ISA test fixture: every test that runs per ISA derives its suite from IsaTest and
// instantiates it with HP_INSTANTIATE_ISA_TESTS. Each TEST_P then runs once per ISA the library has
// kernels for (scalar, avx2, avx512), with that ISA active for every kernel family of the registry
// (kernels/registry.h); on a CPU without it the test is reported as skipped, naming the ISA, never
// as passed. tests/kernels/kernel_matrix_test.cpp is the matrix of every family on it.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "hp/kernels/cpu/isa.h"

namespace hp::kernels {
// gtest prints a parameter with this (found by ADL): "avx2" rather than raw bytes.
inline void PrintTo(Isa isa, std::ostream* os) {
  *os << isa_name(isa);
}
}  // namespace hp::kernels

namespace hp::test {

class IsaTest : public ::testing::TestWithParam<kernels::Isa> {
 protected:
  void SetUp() override {
    if (!kernels::isa_supported(isa()))
      GTEST_SKIP() << kernels::isa_name(isa()) << " kernels need a CPU with "
                   << kernels::isa_name(isa()) << "; this one is not";
    kernels::set_active_isa(isa());
  }
  void TearDown() override { kernels::reset_active_isa(); }
  kernels::Isa isa() const { return GetParam(); }
  const char* isa_label() const { return kernels::isa_name(isa()); }
};

inline std::string isa_param_name(const ::testing::TestParamInfo<kernels::Isa>& info) {
  return kernels::isa_name(info.param);
}

}  // namespace hp::test

#define HP_INSTANTIATE_ISA_TESTS(Suite)                                                            \
  INSTANTIATE_TEST_SUITE_P(Isa, Suite,                                                             \
                           ::testing::Values(::hp::kernels::Isa::scalar, ::hp::kernels::Isa::avx2, \
                                             ::hp::kernels::Isa::avx512),                          \
                           ::hp::test::isa_param_name)
