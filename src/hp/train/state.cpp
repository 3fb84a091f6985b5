// Trainer checkpoints (state.h).
#include "hp/train/state.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/data/loader.h"
#include "hp/optim/optimizer.h"
#include "hp/train/parallelize.h"

namespace hp::train {

namespace fs = std::filesystem;

std::pair<std::string, std::string> split_state_key(const std::string& key) {
  const auto dot = key.rfind('.');
  if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot <= 6)
    HP_THROW(ValueError, "train", "not an optimizer state key: ", key);
  return {key.substr(6, dot - 6), key.substr(dot + 1)};
}

std::string trainer_state_json(int64_t step, const data::LoaderState& loader, int world_size) {
  const RngState rng = default_generator().state();
  const nlohmann::json j = {{"step", step},
                            {"loader", {{"epoch", loader.epoch}, {"cursor", loader.cursor}}},
                            {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                            {"world_size", world_size}};
  return j.dump();
}

std::string resolve_resume(const std::string& resume, const std::string& run_dir) {
  if (resume.empty()) return "";
  if (resume == "auto") return checkpoint::find_latest(run_dir).value_or("");
  if (fs::exists(fs::path(resume) / "metadata.json")) return resume;
  if (auto latest = checkpoint::find_latest(resume)) return *latest;
  HP_THROW(ValueError, "train", "--resume ", resume,
           ": no checkpoint there (expected a step directory with metadata.json, or a run "
           "directory holding one)");
}

int64_t restore(const std::string& step_dir, Parallelized& model, optim::Optimizer& opt,
                data::DataLoader& loader) {
  const checkpoint::Metadata meta = checkpoint::read_metadata(step_dir);
  // Parameters load straight into the shards; optimizer state into fresh tensors of the shard's
  // shape for every state entry the checkpoint has.
  std::map<std::string, Shape> local_shape;
  for (const auto& [fqn, t] : model.params) local_shape[fqn] = t.local().shape();
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& t : meta.tensors) {
    if (t.fqn.rfind("state.", 0) != 0) continue;
    const auto [fqn, name] = split_state_key(t.fqn);
    auto it = local_shape.find(fqn);
    if (it == local_shape.end())
      HP_THROW(ValueError, "train", step_dir, ": optimizer state ", t.fqn,
               " is for a parameter this model does not have");
    state.emplace_back(t.fqn, name == "step" ? zeros({}, DType::i64) : zeros(it->second));
  }
  checkpoint::load(step_dir, model.chunks(state, /*for_save=*/false));
  opt.load_state_dict(state);

  const auto j = nlohmann::json::parse(meta.trainer_state_json, nullptr, false);
  if (j.is_discarded() || !j.contains("step") || !j.contains("loader") || !j.contains("rng"))
    HP_THROW(ValueError, "train", step_dir,
             "/metadata.json: trainer_state lacks step / loader / rng: ", meta.trainer_state_json);
  data::LoaderState ls;
  ls.epoch = j["loader"].value("epoch", int64_t{0});
  ls.cursor = j["loader"].value("cursor", int64_t{0});
  loader.set_state(ls);
  default_generator().set_state(
      RngState{j["rng"].value("seed", uint64_t{0}), j["rng"].value("offset", uint64_t{0})});
  return j["step"].get<int64_t>();
}

}  // namespace hp::train
