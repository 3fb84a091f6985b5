// Helpers for the checkpoint tests (single-process and MPI): reference tensors with exact values
// in every dtype used, boxes of them as chunks, and exact comparison.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hp/checkpoint/dcp.h"
#include "hp/ops/ops.h"

namespace hp::checkpoint::test {

// [shape] of small integers (exact in bf16), different per seed.
inline Tensor reference(const Shape& shape, DType dt, int seed) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7 + seed * 5) % 23) - 11;
  return from_vector(v, shape, dt);
}

// The box [offsets, offsets + sizes) of `full` as a view.
inline Tensor box(const Tensor& full, const std::vector<int64_t>& offsets, const Shape& sizes) {
  Tensor t = full;
  for (size_t d = 0; d < sizes.size(); ++d)
    t = narrow(t, static_cast<int64_t>(d), offsets[d], sizes[d]);
  return t;
}

// A chunk holding the box of `full` (for save), or a zero-filled destination of `dt` (for load).
inline Chunk chunk_of(const std::string& fqn, const Tensor& full,
                      const std::vector<int64_t>& offsets, const Shape& sizes) {
  return {fqn, box(full, offsets, sizes), full.shape(), offsets};
}
inline Chunk empty_chunk(const std::string& fqn, const Shape& global, DType dt,
                         const std::vector<int64_t>& offsets, const Shape& sizes) {
  return {fqn, zeros(sizes, dt), global, offsets};
}

// Element-for-element equality (values compared as doubles, after any dtype conversion).
inline void expect_same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.to_vector(), want.to_vector()) << what;
}

}  // namespace hp::checkpoint::test
