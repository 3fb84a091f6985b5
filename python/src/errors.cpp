// The library's typed exceptions (hp/core/error.h and the components' own) as Python exceptions
// with the same names and message. Each also derives from the built-in exception a Python caller
// would catch for it (hyperparallel.ValueError is a ValueError, IoError an OSError, ...).
#include <string_view>

#include "bindings.h"
#include "hp/dist/communicator.h"
#include "hp/multicore/plan.h"
#include "hp/multicore/runtime.h"
#include "hp/pipeline/schedule.h"
#include "hp/train/trainer.h"

namespace hp::python {

namespace {

// Registers C++ type E as module attribute `name`, subclass of the Python classes `bases`. Later
// registrations are tried first, so a derived class must be registered after its base.
template <class E>
nb::object register_error(nb::module_& m, const char* name, nb::tuple bases) {
  const std::string qualified = std::string("hyperparallel.") + name;
  nb::object cls = nb::steal(PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr));
  m.attr(name) = cls;
  // The class lives as long as the module (an attribute of it), so the borrowed pointer the
  // translator keeps stays valid.
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const E& e) {
          PyErr_SetString(static_cast<PyObject*>(payload), e.what());
        }
      },
      cls.ptr());
  return cls;
}

nb::tuple bases(nb::handle a, PyObject* b = nullptr) {
  return b ? nb::make_tuple(a, nb::handle(b)) : nb::make_tuple(a);
}

}  // namespace

void bind_errors(nb::module_& m) {
  nb::object error = register_error<Error>(m, "Error", bases(nb::handle(PyExc_RuntimeError)));
  nb::object value = register_error<ValueError>(m, "ValueError", bases(error, PyExc_ValueError));
  // The config loader's errors (train/config.h: "[config] run.yaml:12: ...") are ValueErrors in
  // C++; Python callers get them as the narrower ConfigError, a ValueError still.
  nb::object config =
      nb::steal(PyErr_NewException("hyperparallel.ConfigError", bases(value).ptr(), nullptr));
  m.attr("ConfigError") = config;
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const ValueError& e) {
          if (!std::string_view(e.what()).starts_with("[config]")) throw;
          PyErr_SetString(static_cast<PyObject*>(payload), e.what());
        }
      },
      config.ptr());
  register_error<IndexError>(m, "IndexError", bases(value, PyExc_IndexError));
  register_error<InternalError>(m, "InternalError", bases(error));
  register_error<IoError>(m, "IoError", bases(error, PyExc_OSError));
  register_error<MemoryError>(m, "MemoryError", bases(error, PyExc_MemoryError));
  register_error<dist::CommError>(m, "CommError", bases(error));
  register_error<pipeline::ScheduleError>(m, "ScheduleError", bases(value));
  register_error<multicore::PlanError>(m, "PlanError", bases(value));
  register_error<multicore::WatchdogError>(m, "WatchdogError", bases(error));
  register_error<train::TrainingDiverged>(m, "TrainingDiverged", bases(error));
}

}  // namespace hp::python
