// Shared helpers for the model tests: fixture loading and tensor comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "hp/core/tensor.h"
#include "hp/io/safetensors.h"
#include "test_dir.h"

namespace hp::models::testing {

// Every tensor of tests/models/fixtures/<rel_path> (a safetensors file), copied out of the map.
inline std::map<std::string, Tensor> load_fixture(const std::string& rel_path) {
  auto f = io::SafetensorsFile::open(std::string(HP_TEST_DIR) + "/fixtures/" + rel_path);
  std::map<std::string, Tensor> out;
  for (const auto& t : f.tensors()) {
    Tensor x = empty(t.shape, t.dtype);
    std::memcpy(x.raw_data(), t.data, t.nbytes);
    out[t.name] = x;
  }
  return out;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// max |a - b| / max |b|: robust for gradients with many near-zero entries.
inline double rel_diff(const Tensor& a, const Tensor& b) {
  double scale = 0;
  for (double v : b.to_vector()) scale = std::max(scale, std::abs(v));
  return max_abs_diff(a, b) / std::max(scale, 1e-12);
}

}  // namespace hp::models::testing
