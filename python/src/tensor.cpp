// hyperparallel.Tensor: the library's Tensor handle, shared with NumPy without copying.
//
// NumPy → Tensor: Tensor._from_buffer wraps the bytes of a C-contiguous array (the package's
// from_numpy passes them as a flat uint8 view) and keeps that array alive for as long as the
// storage lives. Tensor → NumPy: Tensor._array returns an ndarray over the tensor's own storage
// (shape, strides and offset as the tensor has them) that keeps the tensor alive. Types NumPy lacks
// (bf16, the f8 formats, e8m0) come out as same-width unsigned integers, which the package views
// as ml_dtypes' types.
//
// DLPack: Tensor._dlpack_view is an object with __dlpack__ / __dlpack_device__ over the tensor's
// storage (every dtype under its DLPack code: bf16, the f8 formats and e8m0 included), so
// np.from_dlpack(t) and torch.from_dlpack(t) share the tensor's memory; from_dlpack(obj) wraps any
// CPU DLPack producer's memory (row-major strides; others are copied by the producer's framework)
// and keeps it alive.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/ops/ops.h"

namespace hp::python {

namespace {

using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The DLPack type a tensor's elements are exported as (types NumPy lacks: their raw bits).
nb::dlpack::dtype export_dtype(DType dt) {
  switch (dt) {
    case DType::f64:
      return nb::dtype<double>();
    case DType::f32:
      return nb::dtype<float>();
    case DType::f16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::i32:
      return nb::dtype<int32_t>();
    case DType::i64:
      return nb::dtype<int64_t>();
    case DType::boolean:
      return nb::dtype<bool>();
    case DType::bf16:
      return nb::dtype<uint16_t>();
    case DType::u8:
    case DType::f8e4m3:
    case DType::f8e5m2:
    case DType::e8m0:
      return nb::dtype<uint8_t>();
  }
  HP_THROW(InternalError, "python", "unknown dtype");
}

// The DLPack code of each dtype (DLPack 1.1 names the f8 formats and e8m0).
nb::dlpack::dtype dlpack_dtype(DType dt) {
  using Code = nb::dlpack::dtype_code;
  auto code = [](Code c, uint8_t bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(c), bits, 1};
  };
  switch (dt) {
    case DType::bf16:
      return code(Code::Bfloat, 16);
    case DType::f8e4m3:
      return code(Code::Float8_E4M3FN, 8);
    case DType::f8e5m2:
      return code(Code::Float8_E5M2, 8);
    case DType::e8m0:
      return code(Code::Float8_E8M0FNU, 8);
    default:
      return export_dtype(dt);
  }
}

// The dtype of a DLPack code; ValueError naming it for the types the library lacks.
DType dtype_of_dlpack(nb::dlpack::dtype d) {
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2,
                   DType::e8m0, DType::i32, DType::i64, DType::u8, DType::boolean})
    if (dlpack_dtype(dt) == d) return dt;
  HP_THROW(ValueError, "python", "from_dlpack: DLPack dtype (code ", int(d.code), ", ", int(d.bits),
           " bits, ", int(d.lanes),
           " lanes) has no hyperparallel dtype (f64 f32 bf16 f16 f8e4m3 f8e5m2 e8m0 i32 i64 u8 "
           "bool): convert it first");
}

// Owns one reference to a Python object on behalf of a C++ storage; releasing it takes the GIL
// (the last tensor may die on any thread) unless the interpreter is already gone.
std::shared_ptr<void> keep_python_object(nb::handle obj) {
  obj.inc_ref();
  return std::shared_ptr<void>(obj.ptr(), [](void* p) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(p));
  });
}

// A Tensor over the bytes of `buffer` (a flat uint8 array of exactly numel · itemsize bytes).
Tensor from_buffer(nb::object buffer, const Shape& shape, const std::string& dtype) {
  const DType dt = dtype_arg(dtype);
  for (int64_t d : shape)
    if (d < 0)
      HP_THROW(ValueError, "python", "from_numpy: negative dimension in ", shape_str(shape));
  Bytes bytes = nb::cast<Bytes>(buffer);
  const size_t want = static_cast<size_t>(shape_numel(shape)) * dtype_size(dt);
  if (bytes.size() != want)
    HP_THROW(ValueError, "python", "from_numpy: ", bytes.size(), " bytes for shape ",
             shape_str(shape), " of ", dtype_name(dt), " (", want, " expected)");
  return from_blob(bytes.data(), shape, dt, keep_python_object(buffer));
}

// An ndarray over t's storage (shape, strides and offset as t has them, elements as `dt`); the
// returned object keeps t (and so its storage) alive.
template <class Framework>
nb::ndarray<Framework> view_of(const Tensor& t, nb::dlpack::dtype dt) {
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  auto* owner_tensor = new Tensor(t);
  nb::capsule owner(owner_tensor, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::ndarray<Framework>(t.numel() == 0 ? nullptr : t.raw_data(), shape.size(), shape.data(),
                                owner, strides.data(), dt);
}

nb::ndarray<nb::numpy> to_array(const Tensor& t) {
  return view_of<nb::numpy>(t, export_dtype(t.dtype()));
}

// Any CPU DLPack producer (or buffer) in row-major order, at its own strides otherwise copied
// by nanobind's conversion.
using DlpackIn = nb::ndarray<nb::device::cpu, nb::c_contig>;

// A Tensor over the memory of a DLPack producer; the Tensor's storage keeps the producer's
// managed tensor alive (released under the GIL, on whichever thread frees it last).
Tensor from_dlpack(DlpackIn in) {
  const DType dt = dtype_of_dlpack(in.dtype());
  Shape shape(in.ndim());
  for (size_t i = 0; i < in.ndim(); ++i) shape[i] = static_cast<int64_t>(in.shape(i));
  auto* kept = new DlpackIn(std::move(in));
  std::shared_ptr<void> owner(kept, [](void* p) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    delete static_cast<DlpackIn*>(p);
  });
  return from_blob(kept->data(), shape, dt, std::move(owner));
}

nb::object grad_of(const Tensor& t) {
  const Tensor g = t.grad();
  return g.defined() ? nb::cast(g) : nb::none();
}

}  // namespace

DType dtype_arg(const std::string& name) {
  return dtype_from_name(name);
}

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> cls(m, "Tensor");
  cls.def_static("_from_buffer", &from_buffer, nb::arg("buffer"), nb::arg("shape"),
                 nb::arg("dtype"))
      .def("_array", &to_array)
      .def("_dlpack_view",
           [](const Tensor& t) { return view_of<nb::array_api>(t, dlpack_dtype(t.dtype())); })
      .def_static("_from_dlpack", &from_dlpack, nb::arg("obj"))
      .def_prop_ro("shape",
                   [](const Tensor& t) {
                     nb::list out;
                     for (int64_t d : t.shape()) out.append(d);
                     return nb::tuple(out);
                   })
      .def_prop_ro("strides", [](const Tensor& t) { return t.strides(); })
      .def_prop_ro("dtype_name", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_prop_ro("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("dim", &Tensor::dim)
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) HP_THROW(ValueError, "python", "len() of a 0-d tensor");
             return t.size(0);
           })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def_prop_ro("requires_grad", &Tensor::requires_grad)
      .def(
          "requires_grad_",
          [](const Tensor& t, bool on) {
            t.requires_grad_(on);
            return t;
          },
          nb::arg("requires_grad") = true)
      .def_prop_rw(
          "grad", &grad_of,
          [](const Tensor& t, std::optional<Tensor> g) {
            if (g)
              t.set_grad(*g);
            else
              t.zero_grad();
          },
          nb::arg("value").none())
      .def("zero_grad", &Tensor::zero_grad)
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def(
          "backward",
          [](const Tensor& t, std::optional<Tensor> grad, bool retain_graph) {
            nb::gil_scoped_release release;
            t.backward(grad ? *grad : Tensor(), retain_graph);
          },
          nb::arg("grad") = nb::none(), nb::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      .def("clone", &Tensor::clone)
      .def("contiguous", [](const Tensor& t) { return contiguous(t); })
      .def("item", &Tensor::item)
      .def("tolist_flat", &Tensor::to_vector)
      .def_prop_rw("name", &Tensor::name, [](const Tensor& t, std::string n) { t.set_name(n); })
      .def("fill_",
           [](const Tensor& t, double v) {
             t.fill_(v);
             return t;
           })
      .def("copy_",
           [](const Tensor& t, const Tensor& src) {
             t.copy_from(src);
             return t;
           })
      .def("same", &Tensor::same)
      .def("__repr__", [](const Tensor& t) { return "hyperparallel." + t.to_string(); });

  m.def(
      "empty", [](const Shape& s, const std::string& dt) { return empty(s, dtype_arg(dt)); },
      nb::arg("shape"), nb::arg("dtype") = "f32");
  m.def(
      "zeros", [](const Shape& s, const std::string& dt) { return zeros(s, dtype_arg(dt)); },
      nb::arg("shape"), nb::arg("dtype") = "f32");
  m.def(
      "ones", [](const Shape& s, const std::string& dt) { return ones(s, dtype_arg(dt)); },
      nb::arg("shape"), nb::arg("dtype") = "f32");
  m.def(
      "full",
      [](const Shape& s, double v, const std::string& dt) { return full(s, v, dtype_arg(dt)); },
      nb::arg("shape"), nb::arg("value"), nb::arg("dtype") = "f32");
  m.def(
      "arange",
      [](double start, double end, double step, const std::string& dt) {
        return arange(start, end, step, dtype_arg(dt));
      },
      nb::arg("start"), nb::arg("end"), nb::arg("step") = 1.0, nb::arg("dtype") = "i64");
  m.def(
      "randn",
      [](const Shape& s, const std::string& dt, double mean, double std) {
        return randn(s, dtype_arg(dt), mean, std);
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("mean") = 0.0, nb::arg("std") = 1.0);
  m.def(
      "rand",
      [](const Shape& s, const std::string& dt, double lo, double hi) {
        return rand(s, dtype_arg(dt), lo, hi);
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("low") = 0.0, nb::arg("high") = 1.0);
  m.def(
      "manual_seed", [](uint64_t seed) { manual_seed(seed); }, nb::arg("seed"));
  m.def("grad_enabled", &autograd::grad_enabled);
  m.def("set_grad_enabled", &autograd::set_grad_enabled, nb::arg("enabled"));
}

}  // namespace hp::python
