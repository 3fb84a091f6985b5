// The one strided iteration skeleton every elementwise-style kernel uses.
//
// Given N operands that share a (broadcast) shape, each with its own byte strides, it merges dims
// that are contiguous in all operands, then calls
//   fn(std::array<char*, N> ptrs, std::array<int64_t, N> inner_stride_bytes, int64_t count)
// once per inner row, in parallel over rows (or over pieces of one long row). The partition never
// changes what is computed for an element, so results do not depend on the thread count.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "hp/core/thread_pool.h"

namespace hp {

template <int N, class Fn>
void strided_loop(const std::vector<int64_t>& shape, std::array<char*, N> base,
                  std::array<std::vector<int64_t>, N> stride_bytes, Fn&& fn,
                  int64_t grain = 32768) {
  // Drop size-1 dims, then merge dim d into d+1 when every operand has stride[d] == stride[d+1]*size[d+1].
  std::vector<int64_t> sz;
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (shape[d] == 0) return;
    sz.push_back(shape[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(stride_bytes[k][d]);
  }
  if (sz.empty()) {
    sz.push_back(1);
    for (int k = 0; k < N; ++k) st[k].push_back(0);
  }
  std::vector<int64_t> msz{sz.back()};
  std::array<std::vector<int64_t>, N> mst;
  for (int k = 0; k < N; ++k) mst[k].push_back(st[k].back());
  for (int d = static_cast<int>(sz.size()) - 2; d >= 0; --d) {
    bool merge = true;
    for (int k = 0; k < N; ++k) merge = merge && st[k][d] == mst[k].front() * msz.front();
    if (merge) {
      msz.front() *= sz[d];
    } else {
      msz.insert(msz.begin(), sz[d]);
      for (int k = 0; k < N; ++k) mst[k].insert(mst[k].begin(), st[k][d]);
    }
  }
  const int nd = static_cast<int>(msz.size());
  const int64_t inner = msz.back();
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= msz[d];
  std::array<int64_t, N> inner_st;
  for (int k = 0; k < N; ++k) inner_st[k] = mst[k].back();

  auto row_ptrs = [&](int64_t row) {
    std::array<char*, N> p = base;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t i = row % msz[d];
      row /= msz[d];
      for (int k = 0; k < N; ++k) p[k] += i * mst[k][d];
    }
    return p;
  };

  if (rows == 1) {
    // One long row: split it into pieces.
    parallel_for(0, inner, grain, [&](int64_t b, int64_t e) {
      std::array<char*, N> p = base;
      for (int k = 0; k < N; ++k) p[k] += b * inner_st[k];
      fn(p, inner_st, e - b);
    });
    return;
  }
  const int64_t row_grain = inner >= grain ? 1 : (grain + inner - 1) / inner;
  parallel_for(0, rows, row_grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(row_ptrs(r), inner_st, inner);
  });
}

}  // namespace hp
