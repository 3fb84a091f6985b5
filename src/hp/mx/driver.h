// Internals shared by quantize.cpp and dequantize.cpp: argument checks and
// the list of column-wise row blocks (plain or grouped).
#pragma once

#include <cstdint>
#include <vector>

#include "hp/core/dtype.h"
#include "hp/mx/kernels.h"

namespace hp::mx::detail {

// A run of up to 32 rows quantized as one column-wise block row, and the scale row it owns.
struct RowBlock {
  int64_t row0;
  int64_t nrows;
  int64_t scale_row;
};

// Block rows of a plain column-wise layout: ceil(rows/32) of them.
std::vector<RowBlock> plain_row_blocks(int64_t rows);
// Block rows of the grouped column-wise layout (quantize.h); checks group_ends.
std::vector<RowBlock> grouped_row_blocks(const char* fn, const int32_t* group_ends,
                                         int64_t num_groups, int64_t rows);

// rows >= 0, cols >= 0 and rows * cols fits in int64.
void check_dims(const char* fn, int64_t rows, int64_t cols);
// A pointer must be non-null when the data it addresses is non-empty.
void check_ptr(const char* fn, const char* name, const void* p, int64_t count);
// f32 or bf16; returns the element size.
int64_t check_float_dtype(const char* fn, const char* name, DType dt);

// Code outputs of at least `bytes` are written with non-temporal stores (default 16 MiB). Tests
// lower it to cover that path on small inputs. Not thread-safe against running kernels.
void set_stream_bytes(int64_t bytes);

// Decodes one run of n elements (codes × scale) to f32 (osz 4) or bf16 (osz 2): whole 32-element
// runs straight through the kernel, the tail through zero-padded buffers. shift 5: scales[i / 32]
// (row-wise); shift 0: scales[i] (column-wise).
void dequant_row(const Kernels& k, const uint8_t* codes, const uint8_t* scales, int shift,
                 int64_t n, int elem, char* out, int64_t osz);

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace hp::mx::detail
