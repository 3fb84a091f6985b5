#include "hp/mx/driver.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "hp/core/error.h"
#include "hp/mx/quantize.h"

namespace hp::mx {

namespace detail {

namespace {

bool cpu_has(std::string_view isa) {
  if (isa == "scalar") return true;
  if (isa == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  if (isa == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return false;
}

const Kernels* table_for(std::string_view isa) {
  if (isa == "avx512") return &avx512::kernels();
  if (isa == "avx2") return &avx2::kernels();
  return &scalar_kernels();
}

const Kernels* choose(std::string_view isa) {
  if (isa.empty()) {
    const char* env = std::getenv("HP_MX_ISA");
    if (env && *env) isa = env;
  }
  if (isa.empty()) return cpu_has("avx2") ? table_for("avx2") : table_for("scalar");
  if (isa != "scalar" && isa != "avx2" && isa != "avx512")
    HP_THROW(ValueError, "mx", "unknown ISA '", isa, "' (expected scalar, avx2 or avx512)");
  if (!cpu_has(isa)) HP_THROW(ValueError, "mx", "ISA '", isa, "' is not supported by this CPU");
  return table_for(isa);
}

const Kernels*& current() {
  static const Kernels* k = choose("");
  return k;
}

}  // namespace

const Kernels& active_kernels() {
  return *current();
}

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

std::string_view active_isa() {
  return detail::active_kernels().name;
}

void set_isa(std::string_view isa) {
  detail::current() = detail::choose(isa);
}

int64_t grouped_colwise_scale_rows(const int32_t* group_ends, int64_t num_groups, int64_t rows) {
  return static_cast<int64_t>(
      detail::grouped_row_blocks("grouped_colwise_scale_rows", group_ends, num_groups, rows)
          .size());
}

}  // namespace hp::mx
