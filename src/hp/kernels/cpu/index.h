// Index kernels: gather / scatter_add (torch semantics along one dim), index_select / index_add
// (whole slices picked by a 1-D index), any dtype for the copies, f64/f32/bf16/f16/i32/i64 for
// adds.
//
// Every index tensor is i32 or i64 and every value is checked before any work starts: a value
// outside [0, size) — negative included — throws IndexError "[op] index <v> ... [0, size) ...".
// The adds are deterministic and race-free: each destination is accumulated by one thread in index
// order (scatter_add: lines along dim are independent; index_add: destinations are grouped by a
// stable counting sort), so results never depend on the thread count.
#pragma once

#include "hp/core/tensor.h"

namespace hp::kernels {

// out [index.shape]: out[i][j][k] = a[i][index[i][j][k]][k] for dim = 1; index.size(e) <= a.size(e)
// for e != dim.
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index, const char* op);
// A copy of a with src[i][j][k] added at [i][index[i][j][k]][k] (dim = 1); index.size(e) <=
// src.size(e) for every e and <= a.size(e) for e != dim.
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                   const char* op);
// In place: out (contiguous, playing a's role) += the scatter of src. Backward passes start from
// zeros this way without a copy.
void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                  const char* op);
// index 1-D (or 0-d): a with dim resized to index.numel(), slice i taken from a's slice index[i].
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index, const char* op);
// A copy of a with src's slice i added into slice index[i] along dim; each destination sums in the
// compute type (f32 for bf16/f16) and rounds once.
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                 const char* op);

// In place on a contiguous out (embedding's backward accumulates into zeros this way).
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                const char* op);

}  // namespace hp::kernels
