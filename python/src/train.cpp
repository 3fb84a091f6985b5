// hyperparallel.train: the training loop behind `hp train` (tools/hp/train.cpp calls the same
// train::load_config and train::train), with each step's metrics passed to a Python callback.
// MPI starts as it does for the CLI: the first collective the run needs initializes it, so under
// `hp launch -n N -- python script.py` every process is one rank.
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <exception>

#include "bindings.h"
#include "hp/optim/grad.h"
#include "hp/train/config.h"
#include "hp/train/trainer.h"

namespace hp::python {

namespace {

nb::dict step_dict(const train::StepRecord& r) {
  nb::dict d;
  d["step"] = r.step;
  d["loss"] = r.loss;
  d["grad_norm"] = r.grad_norm;
  d["lr"] = r.lr;
  d["step_s"] = r.step_s;
  d["tokens_per_s"] = r.tokens_per_s;
  d["tflops"] = r.tflops;
  d["mfu"] = r.mfu;
  d["peak_mem_bytes"] = r.peak_mem_bytes;
  return d;
}

nb::dict result_dict(const train::TrainResult& res) {
  nb::list steps, losses, evals;
  for (const auto& r : res.steps) {
    steps.append(step_dict(r));
    losses.append(r.loss);
  }
  for (const auto& e : res.evals) {
    nb::dict d;
    d["step"] = e.step;
    d["loss"] = e.loss;
    d["ppl"] = e.ppl;
    d["tokens"] = e.tokens;
    evals.append(d);
  }
  nb::dict d;
  d["losses"] = losses;
  d["steps"] = steps;
  d["evals"] = evals;
  d["first_step"] = res.first_step;
  d["run_dir"] = res.run_dir;
  d["last_checkpoint"] = res.last_checkpoint;
  d["interrupted"] = res.interrupted;
  d["stop_signal"] = res.stop_signal;
  d["tokens_per_s"] = res.tokens_per_s;
  d["mfu"] = res.mfu;
  d["num_parameters"] = res.num_parameters;
  d["sample"] = res.sample;
  return d;
}

// train::load_config + train::train, as `hp train CONFIG --set ... [--resume R] [--overwrite]`.
// on_step(metrics) runs on every rank after each step; a true return ends the run after that step.
// An exception raised by the callback ends the run and is raised again once it has stopped.
nb::dict run_train(const std::string& config_path, const std::vector<std::string>& overrides,
                   nb::object on_step, const std::string& resume, bool overwrite,
                   int64_t stop_after, bool allow_config_change) {
  const train::Config cfg = train::load_config(config_path, overrides);
  train::TrainOptions opt;
  opt.resume = resume;
  opt.overwrite = overwrite;
  if (overwrite && !resume.empty())
    HP_THROW(ValueError, "python",
             "overwrite starts a fresh run: it cannot be combined with resume");
  opt.stop_after = stop_after;
  opt.allow_config_change = allow_config_change;
  std::exception_ptr callback_error;
  if (!on_step.is_none()) {
    opt.stop_when = [&](const train::StepRecord& r) {
      if (callback_error) return true;
      nb::gil_scoped_acquire gil;
      try {
        const nb::object stop = on_step(step_dict(r));
        const int truth = PyObject_IsTrue(stop.ptr());
        if (truth < 0) nb::raise_python_error();
        return truth == 1;
      } catch (...) {
        callback_error = std::current_exception();
        return true;
      }
    };
  }
  train::TrainResult res;
  {
    nb::gil_scoped_release release;
    res = train::train(cfg, opt);
  }
  if (callback_error) std::rethrow_exception(callback_error);
  return result_dict(res);
}

}  // namespace

void bind_train(nb::module_& m) {
  m.def("train", &run_train, nb::arg("config"), nb::arg("overrides") = std::vector<std::string>{},
        nb::arg("on_step") = nb::none(), nb::arg("resume") = "", nb::arg("overwrite") = false,
        nb::arg("stop_after") = 0, nb::arg("allow_config_change") = false);
  m.def(
      "config_yaml",
      [](const std::string& path, const std::vector<std::string>& overrides) {
        return train::to_yaml(train::load_config(path, overrides));
      },
      nb::arg("config"), nb::arg("overrides") = std::vector<std::string>{},
      "The resolved config (defaults filled in, overrides applied) as YAML; raises ConfigError.");
  m.def(
      "clip_grad_norm",
      [](const std::vector<Tensor>& params, double max_norm) {
        nb::gil_scoped_release release;
        return optim::clip_grad_norm(params, max_norm);
      },
      nb::arg("parameters"), nb::arg("max_norm"),
      "Scales the gradients so their global L2 norm is at most max_norm; returns the norm before.");
}

}  // namespace hp::python
