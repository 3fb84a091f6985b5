#include "hp/mx/driver.h"

#include <algorithm>
#include <limits>
#include <string>

#include "hp/core/error.h"
#include "hp/mx/quantize.h"

namespace hp::mx {

namespace detail {

std::vector<RowBlock> plain_row_blocks(int64_t rows) {
  std::vector<RowBlock> out;
  out.reserve(static_cast<size_t>(ceil_div(rows, kBlockSize)));
  for (int64_t r = 0, s = 0; r < rows; r += kBlockSize, ++s)
    out.push_back({r, std::min<int64_t>(kBlockSize, rows - r), s});
  return out;
}

std::vector<RowBlock> grouped_row_blocks(const char* fn, const int32_t* group_ends,
                                         int64_t num_groups, int64_t rows) {
  if (num_groups < 0) HP_THROW(ValueError, "mx", fn, ": num_groups must be >= 0, got ", num_groups);
  if (num_groups > 0 && !group_ends)
    HP_THROW(ValueError, "mx", fn, ": group_ends is null with num_groups = ", num_groups);
  std::vector<RowBlock> out;
  int64_t start = 0, scale_row = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t end = group_ends[g];
    if (end < start)
      HP_THROW(ValueError, "mx", fn,
               ": group_ends must be non-decreasing and >= 0, but group_ends[", g, "] = ", end,
               " < ", start);
    if (end > rows)
      HP_THROW(ValueError, "mx", fn, ": group_ends[", g, "] = ", end, " is beyond rows = ", rows);
    for (int64_t r = start; r < end; r += kBlockSize)
      out.push_back({r, std::min<int64_t>(kBlockSize, end - r), scale_row++});
    start = end;
  }
  return out;
}

void check_dims(const char* fn, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    HP_THROW(ValueError, "mx", fn, ": rows and cols must be >= 0, got [", rows, ", ", cols, "]");
  if (cols > 0 && rows > std::numeric_limits<int64_t>::max() / 4 / cols)
    HP_THROW(ValueError, "mx", fn, ": [", rows, ", ", cols, "] is too large");
}

void check_ptr(const char* fn, const char* name, const void* p, int64_t count) {
  if (count > 0 && !p)
    HP_THROW(ValueError, "mx", fn, ": ", name, " is null but addresses ", count, " elements");
}

int64_t check_float_dtype(const char* fn, const char* name, DType dt) {
  if (dt != DType::f32 && dt != DType::bf16)
    HP_THROW(ValueError, "mx", fn, ": ", name, " dtype must be f32 or bf16, got ", dtype_name(dt));
  return dt == DType::f32 ? 4 : 2;
}

}  // namespace detail

int64_t grouped_colwise_scale_rows(const int32_t* group_ends, int64_t num_groups, int64_t rows) {
  return static_cast<int64_t>(
      detail::grouped_row_blocks("grouped_colwise_scale_rows", group_ends, num_groups, rows)
          .size());
}

}  // namespace hp::mx
