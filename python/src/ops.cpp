// The differentiable ops of hp/ops/ops.h as module functions (hyperparallel.add, .matmul, ...)
// and the Tensor operators. Each call is the C++ op itself, so its result and gradient are those
// of the same C++ code, bit for bit.
#include "hp/ops/ops.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "bindings.h"

namespace hp::python {

namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);

void bind_elementwise(nb::module_& m) {
  const std::pair<const char*, Unary> unary[] = {
      {"neg", &hp::neg},       {"abs", &hp::abs},   {"exp", &hp::exp},
      {"log", &hp::log},       {"sqrt", &hp::sqrt}, {"rsqrt", &hp::rsqrt},
      {"square", &hp::square}, {"tanh", &hp::tanh}, {"sigmoid", &hp::sigmoid},
      {"silu", &hp::silu},     {"relu", &hp::relu}};
  for (const auto& [name, fn] : unary) m.def(name, fn, nb::arg("a"));
  const std::pair<const char*, Binary> binary[] = {{"sub", &hp::sub},
                                                   {"div", &hp::div},
                                                   {"maximum", &hp::maximum},
                                                   {"minimum", &hp::minimum},
                                                   {"matmul", &hp::matmul}};
  for (const auto& [name, fn] : binary) m.def(name, fn, nb::arg("a"), nb::arg("b"));
  // add / mul take a tensor or a number as second operand.
  m.def("add", static_cast<Binary>(&add), nb::arg("a"), nb::arg("b"));
  m.def("add", static_cast<Tensor (*)(const Tensor&, double)>(&add), nb::arg("a"), nb::arg("b"));
  m.def("mul", static_cast<Binary>(&mul), nb::arg("a"), nb::arg("b"));
  m.def("mul", static_cast<Tensor (*)(const Tensor&, double)>(&mul), nb::arg("a"), nb::arg("b"));
  m.def("pow", &hp::pow, nb::arg("a"), nb::arg("exponent"));
  m.def("gelu", &hp::gelu, nb::arg("a"), nb::arg("approximate") = "none");
  m.def("clamp", &hp::clamp, nb::arg("a"), nb::arg("min"), nb::arg("max"));
  m.def("where", &hp::where, nb::arg("cond"), nb::arg("a"), nb::arg("b"));
  m.def(
      "cast", [](const Tensor& a, const std::string& dt) { return cast(a, dtype_arg(dt)); },
      nb::arg("a"), nb::arg("dtype"));
}

// Python operators on Tensor: a number on either side is a scalar operand.
void bind_operators(nb::class_<Tensor>& cls) {
  cls.def("__add__", static_cast<Binary>(&add), nb::is_operator())
      .def(
          "__add__", [](const Tensor& a, double s) { return add(a, s); }, nb::is_operator())
      .def(
          "__radd__", [](const Tensor& a, double s) { return add(a, s); }, nb::is_operator())
      .def("__sub__", static_cast<Binary>(&sub), nb::is_operator())
      .def(
          "__sub__", [](const Tensor& a, double s) { return add(a, -s); }, nb::is_operator())
      .def(
          "__rsub__", [](const Tensor& a, double s) { return add(neg(a), s); }, nb::is_operator())
      .def("__mul__", static_cast<Binary>(&mul), nb::is_operator())
      .def(
          "__mul__", [](const Tensor& a, double s) { return mul(a, s); }, nb::is_operator())
      .def(
          "__rmul__", [](const Tensor& a, double s) { return mul(a, s); }, nb::is_operator())
      .def("__truediv__", static_cast<Binary>(&div), nb::is_operator())
      .def(
          "__truediv__", [](const Tensor& a, double s) { return mul(a, 1.0 / s); },
          nb::is_operator())
      .def(
          "__rtruediv__", [](const Tensor& a, double s) { return mul(pow(a, -1.0), s); },
          nb::is_operator())
      .def(
          "__neg__", [](const Tensor& a) { return neg(a); }, nb::is_operator())
      .def("__matmul__", &hp::matmul, nb::is_operator())
      .def(
          "__pow__", [](const Tensor& a, double e) { return pow(a, e); }, nb::is_operator());
}

void bind_views(nb::module_& m) {
  m.def("reshape", &hp::reshape, nb::arg("a"), nb::arg("shape"));
  m.def("view", &hp::view, nb::arg("a"), nb::arg("shape"));
  m.def("permute", &hp::permute, nb::arg("a"), nb::arg("dims"));
  m.def("transpose", &hp::transpose, nb::arg("a"), nb::arg("dim0"), nb::arg("dim1"));
  m.def("narrow", &hp::narrow, nb::arg("a"), nb::arg("dim"), nb::arg("start"), nb::arg("length"));
  m.def("slice", &hp::slice, nb::arg("a"), nb::arg("dim"), nb::arg("start"), nb::arg("end"),
        nb::arg("step") = 1);
  m.def("select", &hp::select, nb::arg("a"), nb::arg("dim"), nb::arg("index"));
  m.def("expand", &hp::expand, nb::arg("a"), nb::arg("shape"));
  m.def("unsqueeze", &hp::unsqueeze, nb::arg("a"), nb::arg("dim"));
  m.def("squeeze", &hp::squeeze, nb::arg("a"), nb::arg("dim"));
  m.def("flatten", &hp::flatten, nb::arg("a"), nb::arg("start_dim") = 0, nb::arg("end_dim") = -1);
  m.def("cat", &hp::cat, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("stack", &hp::stack, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("split", &hp::split, nb::arg("a"), nb::arg("sizes"), nb::arg("dim") = 0);
}

// dims None: every element (a 0-d result).
void bind_reductions(nb::module_& m) {
  m.def(
      "sum",
      [](const Tensor& a, std::optional<Dims> dims, bool keepdim) {
        return dims ? sum(a, *dims, keepdim) : sum(a);
      },
      nb::arg("a"), nb::arg("dims") = nb::none(), nb::arg("keepdim") = false);
  m.def(
      "mean",
      [](const Tensor& a, std::optional<Dims> dims, bool keepdim) {
        return dims ? mean(a, *dims, keepdim) : mean(a);
      },
      nb::arg("a"), nb::arg("dims") = nb::none(), nb::arg("keepdim") = false);
  m.def("max", &hp::max, nb::arg("a"), nb::arg("dim"), nb::arg("keepdim") = false);
  m.def("amax", &hp::amax, nb::arg("a"), nb::arg("dims"), nb::arg("keepdim") = false);
  m.def("logsumexp", &hp::logsumexp, nb::arg("a"), nb::arg("dims"), nb::arg("keepdim") = false);
  m.def("softmax", &hp::softmax, nb::arg("a"), nb::arg("dim"));
  m.def("log_softmax", &hp::log_softmax, nb::arg("a"), nb::arg("dim"));
  m.def("topk", &hp::topk, nb::arg("a"), nb::arg("k"), nb::arg("dim") = -1);
}

void bind_layers(nb::module_& m) {
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
        return linear(x, w, b ? *b : Tensor());
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none());
  m.def("embedding", &hp::embedding, nb::arg("weight"), nb::arg("ids"));
  m.def("rms_norm", &hp::rms_norm, nb::arg("x"), nb::arg("weight"), nb::arg("eps") = 1e-6);
  m.def("layer_norm", &hp::layer_norm, nb::arg("x"), nb::arg("weight"), nb::arg("bias"),
        nb::arg("eps") = 1e-5);
  m.def("rotary_embedding", &hp::rotary_embedding, nb::arg("x"), nb::arg("cos"), nb::arg("sin"),
        nb::arg("interleaved") = false, nb::arg("seq_dim") = 2);
  m.def(
      "rope_cos_sin",
      [](int64_t seq_len, int64_t head_dim, double theta, const std::string& dt) {
        return rope_cos_sin(seq_len, head_dim, theta, dtype_arg(dt));
      },
      nb::arg("seq_len"), nb::arg("head_dim"), nb::arg("theta") = 10000.0,
      nb::arg("dtype") = "f32");
  m.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
         std::optional<double> scale, std::optional<Tensor> segments) {
        return scaled_dot_product_attention(q, k, v, causal, scale,
                                            segments ? *segments : Tensor());
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("causal") = true,
      nb::arg("scale") = nb::none(), nb::arg("segments") = nb::none());
  m.def("cross_entropy", &hp::cross_entropy, nb::arg("logits"), nb::arg("targets"),
        nb::arg("ignore_index") = -100, nb::arg("reduction") = "mean");
  m.def("gather", &hp::gather, nb::arg("a"), nb::arg("dim"), nb::arg("index"));
  m.def("scatter_add", &hp::scatter_add, nb::arg("a"), nb::arg("dim"), nb::arg("index"),
        nb::arg("src"));
  m.def("index_select", &hp::index_select, nb::arg("a"), nb::arg("dim"), nb::arg("index"));
  m.def("index_add", &hp::index_add, nb::arg("a"), nb::arg("dim"), nb::arg("index"),
        nb::arg("src"));
  m.def("dropout", &hp::dropout, nb::arg("a"), nb::arg("p"), nb::arg("training") = true);
}

}  // namespace

void bind_ops(nb::module_& m) {
  bind_elementwise(m);
  bind_views(m);
  bind_reductions(m);
  bind_layers(m);
  // bench/python_overhead.py's baseline: seconds per add(a, b) called from C++ in a loop.
  m.def(
      "_time_add",
      [](const Tensor& a, const Tensor& b, int64_t iters) {
        nb::gil_scoped_release release;
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iters; ++i) (void)hp::add(a, b);
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        return dt.count() / static_cast<double>(std::max<int64_t>(iters, 1));
      },
      nb::arg("a"), nb::arg("b"), nb::arg("iters"));
  auto cls = nb::borrow<nb::class_<Tensor>>(m.attr("Tensor"));
  bind_operators(cls);
}

}  // namespace hp::python
