#include "hp/kernels/cpu/elementwise.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "hp/core/strided_loop.h"
#include "hp/kernels/cpu/ew_table.h"

namespace hp::kernels {

int ew_arity(EwOp op) {
  static constexpr int kArity[] = {
#define HP_EW_ENTRY(e, F, arity) arity,
      HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
  };
  return kArity[static_cast<int>(op)];
}

const char* ew_name(EwOp op) {
  static constexpr const char* kNames[] = {
#define HP_EW_ENTRY(e, F, arity) #e,
      HP_EW_OPS(HP_EW_ENTRY)
#undef HP_EW_ENTRY
  };
  return kNames[static_cast<int>(op)];
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      HP_THROW(ValueError, op, "shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return DType::i64;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;
}

namespace {

constexpr int64_t kTile = 1024;

// Byte strides of t broadcast to `shape` (0 on broadcast dims).
Shape bcast_byte_strides(const Tensor& t, const Shape& shape) {
  Shape out(shape.size(), 0);
  const size_t off = shape.size() - static_cast<size_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.shape()[i] != 1) out[off + i] = t.strides()[i] * static_cast<int64_t>(t.itemsize());
  return out;
}

// Loads m elements of dtype dt at byte stride `st` into f32 dst.
void load_f32(const EwTable& tab, const char* src, DType dt, int64_t st, float* dst, int64_t m) {
  const int64_t item = static_cast<int64_t>(dtype_size(dt));
  if (st == 0) {
    std::fill(dst, dst + m, static_cast<float>(load_as_double(src, dt)));
  } else if (st == item && dt == DType::bf16) {
    tab.bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, m);
  } else if (st == item && dt == DType::f16) {
    tab.f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, m);
  } else if (dt == DType::f32) {
    for (int64_t i = 0; i < m; ++i) std::memcpy(dst + i, src + i * st, 4);
  } else if (dt == DType::bf16) {
    for (int64_t i = 0; i < m; ++i) dst[i] = bf16_to_f32(*reinterpret_cast<const uint16_t*>(src + i * st));
  } else {
    for (int64_t i = 0; i < m; ++i) dst[i] = static_cast<float>(load_as_double(src + i * st, dt));
  }
}

void store_f32(const EwTable& tab, char* dst, DType dt, int64_t st, const float* src, int64_t m) {
  const int64_t item = static_cast<int64_t>(dtype_size(dt));
  if (st == item && dt == DType::bf16) {
    tab.f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst), m);
  } else if (st == item && dt == DType::f16) {
    tab.f32_to_f16(src, reinterpret_cast<uint16_t*>(dst), m);
  } else if (dt == DType::f32) {
    for (int64_t i = 0; i < m; ++i) std::memcpy(dst + i * st, src + i, 4);
  } else {
    for (int64_t i = 0; i < m; ++i) store_from_double(dst + i * st, dt, src[i]);
  }
}

bool is_f32_family(DType dt) { return dt == DType::f32 || dt == DType::bf16 || dt == DType::f16; }

// One inner row whose operands are all bf16 (or all f16), each contiguous or broadcast (stride 0):
// the 16-bit kernel widens, computes and rounds in registers. A broadcast operand is expanded once
// per row into a tile of its value (uint16_t[kTile]), which every tile of the row then reads.
void half_row(EwHalfFn fn, int arity, const std::array<char*, 3>& ptr,
              const std::array<int64_t, 3>& st, int64_t n, const float* p) {
  alignas(64) uint16_t bcast[2][kTile];
  for (int k = 1; k <= arity; ++k)
    if (st[k] == 0) {
      uint16_t v;
      std::memcpy(&v, ptr[k], 2);
      std::fill(bcast[k - 1], bcast[k - 1] + std::min(kTile, n), v);
    }
  for (int64_t off = 0; off < n; off += kTile) {
    const uint16_t* in[2] = {nullptr, nullptr};
    for (int k = 1; k <= arity; ++k)
      in[k - 1] = st[k] == 0 ? bcast[k - 1] : reinterpret_cast<const uint16_t*>(ptr[k]) + off;
    const int64_t m = std::min(kTile, n - off);
    fn(reinterpret_cast<uint16_t*>(ptr[0]) + off, in, m, p);
  }
}

}  // namespace

void elementwise_into(EwOp op, const Tensor& out, const Tensor& a, const Tensor& b,
                      std::initializer_list<float> params) {
  const int arity = ew_arity(op);
  const char* name = ew_name(op);
  if (!a.defined() || (arity == 2 && !b.defined()))
    HP_THROW(ValueError, name, "needs ", arity, " defined inputs");
  Shape shape = a.shape();
  if (arity == 2) shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (broadcast_shapes(shape, out.shape(), name) != out.shape())
    HP_THROW(ValueError, name, "output shape ", shape_str(out.shape()),
             " cannot hold the broadcast result ", shape_str(shape));
  float p[4] = {0, 0, 0, 0};
  std::copy(params.begin(), params.end(), p);
  const Tensor& b_or_a = arity == 2 ? b : a;
  const DType dts[3] = {out.dtype(), a.dtype(), b_or_a.dtype()};
  const bool f32_path = is_f32_family(dts[0]) && is_f32_family(dts[1]) && is_f32_family(dts[2]);
  const EwTable& tab = kernel_table<EwTable>();
  const EwF32Fn f32_fn = tab.f32[static_cast<int>(op)];
  // All bf16 or all f16: the kernels that convert in registers.
  const bool half_path = (dts[0] == DType::bf16 || dts[0] == DType::f16) && dts[1] == dts[0] &&
                         dts[2] == dts[0];
  const EwHalfFn half_fn = (dts[0] == DType::f16 ? tab.f16 : tab.bf16)[static_cast<int>(op)];
  const EwF64Fn f64_fn = ew_table_f64()[static_cast<int>(op)];

  strided_loop<3>(
      out.shape(),
      {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()),
       static_cast<char*>(b_or_a.raw_data())},
      {bcast_byte_strides(out, out.shape()), bcast_byte_strides(a, out.shape()),
       bcast_byte_strides(b_or_a, out.shape())},
      [&](std::array<char*, 3> ptr, std::array<int64_t, 3> st, int64_t n) {
        // bf16 or f16 throughout, contiguous or broadcast: converted in registers (mixed dtypes
        // and strided operands take the f32 tile path below).
        if (half_path && st[0] == 2 && (st[1] == 2 || st[1] == 0) &&
            (arity == 1 || st[2] == 2 || st[2] == 0)) {
          half_row(half_fn, arity, ptr, st, n, p);
        } else if (f32_path) {
          alignas(64) float buf[3][kTile];
          for (int64_t off = 0; off < n; off += kTile) {
            const int64_t m = std::min(kTile, n - off);
            const float* in[2];
            for (int k = 1; k <= arity; ++k) {
              const char* src = ptr[k] + off * st[k];
              if (dts[k] == DType::f32 && st[k] == 4) {
                in[k - 1] = reinterpret_cast<const float*>(src);
              } else {
                load_f32(tab, src, dts[k], st[k], buf[k], m);
                in[k - 1] = buf[k];
              }
            }
            char* dst = ptr[0] + off * st[0];
            const bool direct = dts[0] == DType::f32 && st[0] == 4;
            float* o = direct ? reinterpret_cast<float*>(dst) : buf[0];
            f32_fn(o, in, m, p);
            if (!direct) store_f32(tab, dst, dts[0], st[0], o, m);
          }
        } else {
          // f64 / integer path: exact libm math in double, generic loads.
          double buf[3][256];
          for (int64_t off = 0; off < n; off += 256) {
            const int64_t m = std::min<int64_t>(256, n - off);
            const double* in[2];
            for (int k = 1; k <= arity; ++k) {
              const char* src = ptr[k] + off * st[k];
              for (int64_t i = 0; i < m; ++i) buf[k][i] = load_as_double(src + i * st[k], dts[k]);
              in[k - 1] = buf[k];
            }
            f64_fn(buf[0], in, m, p);
            char* dst = ptr[0] + off * st[0];
            for (int64_t i = 0; i < m; ++i) store_from_double(dst + i * st[0], dts[0], buf[0][i]);
          }
        }
      });
}

Tensor elementwise(EwOp op, const Tensor& a, const Tensor& b, DType out_dtype,
                   std::initializer_list<float> params) {
  Shape shape = ew_arity(op) == 2 ? broadcast_shapes(a.shape(), b.shape(), ew_name(op)) : a.shape();
  Tensor out = empty(shape, out_dtype);
  elementwise_into(op, out, a, b, params);
  return out;
}

}  // namespace hp::kernels
