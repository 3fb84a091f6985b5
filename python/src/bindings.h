// The pieces of the hyperparallel._core extension (one bind_* per source file), and the helpers
// they share. Python-facing names follow the C++ API (hp/ops/ops.h, hp/models, hp/train).
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "hp/core/tensor.h"
#include "hp/data/loader.h"

namespace hp::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_models(nb::module_& m);
void bind_train(nb::module_& m);
void bind_loop(nb::module_& m);
void bind_checkpoint(nb::module_& m);

// The DType of a Python dtype argument: a name ("f32", "bf16", "i64", ...); ValueError otherwise.
DType dtype_arg(const std::string& name);

// hyperparallel.DataLoader. DataLoader declares no move constructor (nor can its sources be
// copied): Python holds it here.
struct Loader {
  std::unique_ptr<data::DataLoader> loader;
};

}  // namespace hp::python
