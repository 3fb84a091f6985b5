// The pieces of a hand-written training loop, each the one `hp train` uses (train/setup.cpp,
// train/trainer.cpp): the config, the model built from it, its data loader, the optimizer with the
// config's groups (or AdamW / Muon by hand), the learning-rate schedule and gradient clipping.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hp/core/random.h"
#include "hp/data/loader.h"
#include "hp/models/transformer.h"
#include "hp/optim/grad.h"
#include "hp/optim/optimizer.h"
#include "hp/optim/schedule.h"
#include "hp/train/config.h"
#include "hp/train/options.h"
#include "hp/train/setup.h"

namespace hp::python {

namespace {

using optim::NamedTensor;
using optim::Optimizer;

// The trainer's model: training.seed seeds the default generator, then the model is built (or
// loaded from model.path) and checked against the training data (train/setup.cpp build_run).
std::shared_ptr<models::CausalLM> build_model(const train::Config& cfg) {
  const train::RunData data = train::load_run_data(cfg);
  manual_seed(static_cast<uint64_t>(cfg.training.seed));
  return train::build_causal_lm(cfg, *data.sources.front().dataset);
}

Loader make_loader(const train::Config& cfg) {
  train::RunData data = train::load_run_data(cfg);
  return {std::make_unique<data::DataLoader>(std::move(data.sources), cfg.training.seq_len,
                                             static_cast<uint64_t>(cfg.training.seed),
                                             cfg.data.shuffle)};
}

nb::dict batch_dict(const data::Batch& b) {
  nb::dict d;
  d["ids"] = b.ids;
  d["labels"] = b.labels.defined() ? nb::cast(b.labels) : nb::none();
  d["targets"] = b.targets;
  d["global_targets"] = b.global_targets;
  return d;
}

void bind_config(nb::module_& m) {
  nb::class_<train::Config>(m, "Config")
      .def_static("load", &train::load_config, nb::arg("path"),
                  nb::arg("overrides") = std::vector<std::string>{},
                  "A training config (YAML) with key=value overrides, checked as `hp train` does.")
      .def("to_yaml", [](const train::Config& c) { return train::to_yaml(c); })
      .def_prop_ro("steps", [](const train::Config& c) { return c.training.steps; })
      .def_prop_ro("batch_size", [](const train::Config& c) { return c.training.batch_size; })
      .def_prop_ro("seq_len", [](const train::Config& c) { return c.training.seq_len; })
      .def_prop_ro("grad_clip", [](const train::Config& c) { return c.training.grad_clip; })
      .def_prop_ro("seed", [](const train::Config& c) { return c.training.seed; })
      .def(
          "lr",
          [](const train::Config& c, int64_t step) {
            return c.optimizer.lr * optim::lr_factor(train::schedule_spec(c), step - 1);
          },
          nb::arg("step"), "The scheduled learning rate of 1-based optimizer step `step`.");
  m.def("build_model", &build_model, nb::arg("config"),
        "The model `hp train` starts from: seeded by training.seed, built from model.arch and "
        "sizes (or loaded from model.path).");
}

void bind_loader(nb::module_& m) {
  nb::class_<Loader>(m, "DataLoader")
      .def_static("from_config", &make_loader, nb::arg("config"),
                  "The training loader of a config's data section (seeded by training.seed).")
      .def(
          "next",
          [](Loader& l, int64_t batch, int dp_rank, int dp_size) {
            return batch_dict(l.loader->next(batch, dp_rank, dp_size));
          },
          nb::arg("batch_size"), nb::arg("dp_rank") = 0, nb::arg("dp_size") = 1,
          "The next global batch (this rank's rows): ids i64 [rows, seq_len + 1], labels (or "
          "None), targets, global_targets.")
      .def_prop_ro("seq_len", [](const Loader& l) { return l.loader->seq_len(); })
      .def_prop_ro("samples_per_epoch",
                   [](const Loader& l) { return l.loader->samples_per_epoch(); });
}

optim::OptimizerOptions manual_options(const std::string& algorithm, double weight_decay,
                                       double beta1, double beta2, double eps, double momentum,
                                       int ns_steps) {
  optim::OptimizerOptions o;
  o.default_algorithm = optim::algorithm_from_name(algorithm);
  o.adamw = {beta1, beta2, eps, weight_decay};
  o.muon.momentum = momentum;
  o.muon.ns_steps = ns_steps;
  o.muon.weight_decay = weight_decay;
  return o;
}

void bind_optimizer(nb::module_& m) {
  nb::class_<Optimizer>(m, "Optimizer")
      .def_static(
          "from_config",
          [](std::vector<NamedTensor> params, const train::Config& cfg) {
            return std::make_unique<Optimizer>(std::move(params),
                                               train::optimizer_options(cfg.optimizer));
          },
          nb::arg("named_parameters"), nb::arg("config"),
          "The optimizer of a config's optimizer section (its algorithm, groups, decay).")
      .def_static(
          "create",
          [](std::vector<NamedTensor> params, const std::string& algorithm, double weight_decay,
             double beta1, double beta2, double eps, double momentum, int ns_steps) {
            return std::make_unique<Optimizer>(
                std::move(params),
                manual_options(algorithm, weight_decay, beta1, beta2, eps, momentum, ns_steps));
          },
          nb::arg("named_parameters"), nb::arg("algorithm") = "adamw",
          nb::arg("weight_decay") = 0.01, nb::arg("beta1") = 0.9, nb::arg("beta2") = 0.999,
          nb::arg("eps") = 1e-8, nb::arg("momentum") = 0.95, nb::arg("ns_steps") = 5)
      .def(
          "step",
          [](Optimizer& o, double lr, double grad_scale) {
            nb::gil_scoped_release release;
            o.step(lr, grad_scale);
          },
          nb::arg("lr"), nb::arg("grad_scale") = 1.0)
      .def("zero_grad", &Optimizer::zero_grad)
      .def("parameters", &Optimizer::parameters)
      .def("state_dict", &Optimizer::state_dict)
      .def("load_state_dict", &Optimizer::load_state_dict, nb::arg("state"));
  m.def(
      "grad_norm",
      [](const std::vector<Tensor>& params) {
        nb::gil_scoped_release release;
        return optim::clip_grad_norm(params, 0.0);
      },
      nb::arg("parameters"), "The L2 norm over the parameters' gradients (nothing is scaled).");
  m.def("clip_factor", &optim::clip_factor, nb::arg("norm"), nb::arg("max_norm"),
        "max_norm / (norm + 1e-6) when the norm is above max_norm, else 1: Optimizer.step's "
        "grad_scale that clips as clip_grad_norm does.");
}

}  // namespace

void bind_loop(nb::module_& m) {
  bind_config(m);
  bind_loader(m);
  bind_optimizer(m);
}

}  // namespace hp::python
