// hyperparallel.save_checkpoint / load_checkpoint: a hand-written loop's parameters, optimizer
// state, loader position and RNG in the DCP layout `hp train` writes (checkpoint/dcp.h, the
// trainer state of train/state.h), so `hp ckpt` reads it, `hp train --resume` continues it, a loop
// resumes from it bit for bit, and a loop loads `hp train`'s checkpoints (any rank count).
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <map>
#include <tuple>

#include "bindings.h"
#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/dist/communicator.h"
#include "hp/io/json.h"
#include "hp/models/transformer.h"
#include "hp/optim/optimizer.h"
#include "hp/train/config.h"
#include "hp/train/setup.h"
#include "hp/train/state.h"

namespace hp::python {

namespace {

using models::CausalLM;
using optim::Optimizer;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// One process's pieces: every tensor whole, its own box at offset 0 (0-d step counters: no
// offsets).
std::vector<checkpoint::Chunk> whole_chunks(const NamedTensors& tensors) {
  std::vector<checkpoint::Chunk> out;
  for (const auto& [fqn, t] : tensors)
    out.push_back({fqn, t, t.shape(), std::vector<int64_t>(t.shape().size(), 0)});
  return out;
}

// A hand-written loop is one process: Python binds no collective (no gradient all-reduce), so the
// ranks of `hp launch -n N -- python` would each train a model of their own; multi-rank training
// and its checkpoints are hyperparallel.train's.
void check_one_process(const char* what) {
  const int n = dist::world()->size();
  if (n > 1)
    HP_THROW(ValueError, "python", what, ": a hand-written loop checkpoints from one process, ",
             "this is one of ", n, " ranks (multi-rank training is hyperparallel.train's)");
}

std::string save_checkpoint(const std::string& dir, const CausalLM& model, const Optimizer* opt,
                            int64_t step, const Loader* loader, const train::Config* cfg,
                            const std::string& extra_json, int64_t keep) {
  check_one_process("save_checkpoint");
  if (step < 0) HP_THROW(ValueError, "python", "save_checkpoint: step ", step, " is negative");
  NamedTensors tensors = model.named_parameters();
  if (opt) {
    const NamedTensors state = opt->state_dict();
    tensors.insert(tensors.end(), state.begin(), state.end());
  }
  // The trainer's state (step, loader position, RNG), plus the caller's "extra" JSON value.
  io::JsonValue state = io::parse_json_value(
      train::trainer_state_json(step, loader ? loader->loader->state() : data::LoaderState{}, 1),
      "trainer_state");
  if (!extra_json.empty())
    state["extra"] = io::parse_json_value(extra_json, "save_checkpoint: extra");
  checkpoint::SaveOptions so;
  so.keep = keep;
  // config.json always (hp ckpt export needs it); the run's config.yaml and tokenizer with a
  // config.
  so.extra_files = cfg ? train::checkpoint_files(*cfg, model)
                       : std::vector<std::pair<std::string, std::string>>{
                             {"config.json", models::model_config_to_json(model.config())}};
  const std::string json = state.dump(-1, io::KeyOrder::sorted);
  nb::gil_scoped_release release;
  return checkpoint::save(dir, step, whole_chunks(tensors), json, nullptr, so);
}

// (step, step dir, extra JSON or "").
std::tuple<int64_t, std::string, std::string> load_checkpoint(const std::string& path,
                                                              CausalLM& model, Optimizer* opt,
                                                              Loader* loader) {
  const checkpoint::Metadata meta = checkpoint::read_metadata(checkpoint::resolve_step_dir(path));
  NamedTensors tensors = model.named_parameters();
  std::map<std::string, Shape> shapes;
  for (const auto& [fqn, t] : tensors) shapes[fqn] = t.shape();
  const NamedTensors state =
      opt ? train::state_buffers(meta, shapes, {}, opt->state_tier()) : NamedTensors{};
  tensors.insert(tensors.end(), state.begin(), state.end());
  {
    nb::gil_scoped_release release;
    checkpoint::load(meta, whole_chunks(tensors));
  }
  if (opt) opt->load_state_dict(state);
  const int64_t step = train::restore_trainer_state(meta, loader ? loader->loader.get() : nullptr);
  const io::JsonValue saved = io::parse_json_value(meta.trainer_state_json, "trainer_state");
  const io::JsonValue* extra = saved.find("extra");
  return {step, meta.dir, extra ? extra->dump() : std::string()};
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  m.def("_save_checkpoint", &save_checkpoint, nb::arg("dir"), nb::arg("model"),
        nb::arg("optimizer").none(), nb::arg("step"), nb::arg("loader").none(),
        nb::arg("config").none(), nb::arg("extra_json"), nb::arg("keep"));
  m.def("_load_checkpoint", &load_checkpoint, nb::arg("path"), nb::arg("model"),
        nb::arg("optimizer").none(), nb::arg("loader").none());
}

}  // namespace hp::python
