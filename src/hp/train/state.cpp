// Trainer checkpoints (state.h).
#include "hp/train/state.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/data/loader.h"
#include "hp/fsdp/fsdp.h"
#include "hp/optim/optimizer.h"

namespace hp::train {

namespace fs = std::filesystem;

namespace {

std::vector<int64_t> row_box(const fsdp::FsdpModel::ShardInfo& i) {
  std::vector<int64_t> off(i.global_shape.size(), 0);
  if (!off.empty()) off[0] = i.row_offset;
  return off;
}

// Every parameter shard as a chunk (appended to `chunks`), and the shards by FQN.
std::map<std::string, fsdp::FsdpModel::ShardInfo> parameter_chunks(
    const fsdp::FsdpModel& model, std::vector<checkpoint::Chunk>& chunks) {
  std::map<std::string, fsdp::FsdpModel::ShardInfo> by_fqn;
  for (const auto& i : model.shard_info()) {
    chunks.push_back({i.fqn, i.shard, i.global_shape, row_box(i)});
    by_fqn.emplace(i.fqn, i);
  }
  return by_fqn;
}

}  // namespace

std::pair<std::string, std::string> split_state_key(const std::string& key) {
  const auto dot = key.rfind('.');
  if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot <= 6)
    HP_THROW(ValueError, "train", "not an optimizer state key: ", key);
  return {key.substr(6, dot - 6), key.substr(dot + 1)};
}

std::vector<checkpoint::Chunk> state_chunks(const fsdp::FsdpModel& model,
                                            const optim::Optimizer& opt) {
  std::vector<checkpoint::Chunk> chunks;
  const auto by_fqn = parameter_chunks(model, chunks);
  for (const auto& [key, t] : opt.state_dict()) {
    const auto [fqn, name] = split_state_key(key);
    if (name == "step") {
      chunks.push_back({key, t, Shape{}, {}, /*replicated=*/true});
      continue;
    }
    const auto& i = by_fqn.at(fqn);
    chunks.push_back({key, t, i.global_shape, row_box(i)});
  }
  return chunks;
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

int64_t restore(const std::string& step_dir, fsdp::FsdpModel& model, optim::Optimizer& opt,
                data::DataLoader& loader) {
  const checkpoint::Metadata meta = checkpoint::read_metadata(step_dir);
  // Parameters load straight into the shards; optimizer state into fresh tensors of the shard's
  // shape for every state entry the checkpoint has.
  std::vector<checkpoint::Chunk> chunks;
  const auto by_fqn = parameter_chunks(model, chunks);
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& t : meta.tensors) {
    if (t.fqn.rfind("state.", 0) != 0) continue;
    const auto [fqn, name] = split_state_key(t.fqn);
    auto it = by_fqn.find(fqn);
    if (it == by_fqn.end())
      HP_THROW(ValueError, "train", step_dir, ": optimizer state ", t.fqn,
               " is for a parameter this model does not have");
    Tensor local = name == "step" ? zeros({}, DType::i64) : zeros(it->second.shard.shape());
    chunks.push_back({t.fqn, local, t.global_shape,
                      name == "step" ? std::vector<int64_t>{} : row_box(it->second),
                      name == "step"});
    state.emplace_back(t.fqn, local);
  }
  checkpoint::load(step_dir, chunks);
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
