// Trainer checkpoints (state.h).
#include "hp/train/state.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <ostream>

#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/data/loader.h"
#include "hp/io/json.h"
#include "hp/optim/optimizer.h"
#include "hp/train/parallelize.h"
#include "hp/train/schema.h"

namespace hp::train {

namespace fs = std::filesystem;

std::string trainer_state_json(int64_t step, const data::LoaderState& loader, int world_size) {
  const RngState rng = default_generator().state();
  const io::JsonValue j = io::JsonValue::object(
      {{"step", step},
       {"loader", io::JsonValue::object({{"epoch", loader.epoch}, {"cursor", loader.cursor}})},
       {"rng", io::JsonValue::object({{"seed", rng.seed}, {"offset", rng.offset}})},
       {"world_size", world_size}});
  return j.dump(-1, io::KeyOrder::sorted);
}

namespace {

// Complete checkpoints of run_dir to try, newest first: `latest`'s, then every step-<N> dir with
// metadata.json by step.
std::vector<std::string> resume_candidates(const std::string& run_dir) {
  std::vector<std::string> out;
  if (auto latest = checkpoint::find_latest(run_dir)) out.push_back(*latest);
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 6 || name.size() > 23 || name.rfind("step-", 0) != 0 ||
        !std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !fs::is_regular_file(e.path() / "metadata.json", ec))
      continue;
    steps.emplace_back(std::stoll(name.substr(5)), e.path().string());
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a > b; });
  for (const auto& [step, dir] : steps)
    if (out.empty() || fs::path(dir) != fs::path(out.front())) out.push_back(dir);
  return out;
}

// "rank-00001.safetensors (tensor 'w'): checksum mismatch ... (and 2 more faults)".
std::string describe_faults(const std::vector<checkpoint::Fault>& faults) {
  const checkpoint::Fault& f = faults.front();
  std::string s = f.file + (f.tensor.empty() ? "" : " (tensor '" + f.tensor + "')") + ": " + f.what;
  if (faults.size() > 1) s += " (and " + std::to_string(faults.size() - 1) + " more faults)";
  return s;
}

// The newest candidate of run_dir that verifies, "" when there is none at all.
std::string newest_verified(const std::string& run_dir, std::ostream* log) {
  const std::vector<std::string> candidates = resume_candidates(run_dir);
  std::string rejected;
  for (const std::string& dir : candidates) {
    const std::vector<checkpoint::Fault> faults = checkpoint::verify(dir);
    if (faults.empty()) return dir;
    const std::string why = describe_faults(faults);
    if (log) *log << "skipping checkpoint " << dir << ": " << why << "\n";
    rejected += "\n  " + dir + ": " + why;
  }
  if (candidates.empty()) return "";
  HP_THROW(ValueError, "train", "--resume auto: no checkpoint in ", run_dir,
           " verifies (hp ckpt verify lists every fault):", rejected);
}

// A field's value as the resolved YAML writes it ("32", "qwen3", "\"\"").
std::string value_text(const Field& f) {
  YAML::Emitter e;
  f.emit(e);
  return e.c_str();
}

}  // namespace

std::string resolve_resume(const std::string& resume, const std::string& run_dir,
                           std::ostream* log) {
  if (resume.empty()) return "";
  if (resume == "auto") return newest_verified(run_dir, log);
  if (fs::exists(fs::path(resume) / "metadata.json")) return resume;
  if (auto latest = checkpoint::find_latest(resume)) return *latest;
  HP_THROW(ValueError, "train", "--resume ", resume,
           ": no checkpoint there (expected a step directory with metadata.json, or a run "
           "directory holding one)");
}

std::vector<ConfigChange> config_changes(const Config& saved, const Config& now) {
  // Schemas bound to copies: one walk over every field, whatever fields the sections grow.
  Config a = saved, b = now;
  Schema sa, sb;
  a.describe(sa);
  b.describe(sb);
  std::vector<ConfigChange> out;
  for (const auto& f : sa.fields()) {
    if (!f->alias_of.empty() || !f->emit) continue;
    const Field* g = sb.find(f->path);
    std::string was = value_text(*f), is = g ? value_text(*g) : "(none)";
    if (was != is)
      out.push_back(
          {f->path, std::move(was), std::move(is), resume_change(f->path) == ResumeChange::math});
  }
  return out;
}

std::string ConfigChange::text() const {
  return path + ": " + was + " in the checkpoint, " + is + " now";
}

void check_resume_config(const std::string& step_dir, const Config& now, bool allow_change,
                         std::ostream* log) {
  const fs::path file = fs::path(step_dir) / "config.yaml";
  if (!fs::exists(file)) return;
  std::vector<ConfigChange> changes;
  try {
    changes = config_changes(
        parse_config(io::read_text_file(file.string(), "train"), file.string()), now);
  } catch (const ValueError& e) {
    if (!allow_change)
      HP_THROW(ValueError, "train", file.string(),
               ": cannot compare the run's config with the checkpoint's (pass "
               "--allow-config-change to resume anyway): ",
               e.what());
    if (log) *log << "warning: " << file.string() << " not compared: " << e.what() << "\n";
    return;
  }
  std::string all, refused;
  size_t n_refused = 0;
  for (const ConfigChange& c : changes) {
    all += "\n  " + c.text();
    if (c.changes_math) refused += "\n  " + c.text(), ++n_refused;
  }
  if (n_refused > 0 && !allow_change)
    HP_THROW(ValueError, "train", file.string(), ": resuming would change the run's math; ",
             n_refused,
             " key(s) differ from the checkpoint's config (pass --allow-config-change to resume "
             "anyway):",
             refused);
  if (log && !changes.empty())
    *log << (n_refused > 0 ? "resuming with config changes (--allow-config-change):"
                           : "resuming with config changes that keep the math:")
         << all << "\n";
}

std::string resume_step_dir(const std::string& resume, bool allow_config_change, const Config& cfg,
                            std::ostream& log) {
  const std::string dir = resolve_resume(resume, cfg.run.dir, &log);
  if (!dir.empty()) check_resume_config(dir, cfg, allow_config_change, &log);
  return dir;
}

std::vector<std::pair<std::string, Tensor>> state_buffers(
    const checkpoint::Metadata& meta, const std::map<std::string, Shape>& local_shape,
    const std::set<std::string>& held_elsewhere, MemTier tier) {
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& t : meta.tensors) {
    if (t.fqn.rfind("state.", 0) != 0) continue;
    const auto [fqn, name] = split_state_key(t.fqn);
    auto it = local_shape.find(fqn);
    if (it == local_shape.end() && held_elsewhere.count(fqn)) continue;
    if (it == local_shape.end())
      HP_THROW(ValueError, "train", meta.dir, ": optimizer state ", t.fqn,
               " is for a parameter this model does not have");
    // In the state's tier: a resumed run with offloaded state must not need room on the device.
    state.emplace_back(
        t.fqn, name == "step" ? zeros({}, DType::i64) : zeros(it->second, DType::f32, tier));
  }
  return state;
}

int64_t restore_trainer_state(const checkpoint::Metadata& meta, data::DataLoader* loader) {
  const std::optional<io::Json> j =
      io::try_parse_json(meta.trainer_state_json, meta.dir + "/metadata.json: trainer_state");
  if (!j || !j->contains("step") || !j->contains("loader") || !j->contains("rng"))
    HP_THROW(ValueError, "train", meta.dir,
             "/metadata.json: trainer_state lacks step / loader / rng: ", meta.trainer_state_json);
  data::LoaderState ls;
  ls.epoch = j->at("loader").get_int_or("epoch", 0);
  ls.cursor = j->at("loader").get_int_or("cursor", 0);
  if (loader) loader->set_state(ls);
  default_generator().set_state(
      RngState{j->at("rng").get_uint_or("seed", 0), j->at("rng").get_uint_or("offset", 0)});
  return j->get_int("step");
}

int64_t restore(const std::string& step_dir, Parallelized& model, optim::Optimizer& opt,
                data::DataLoader& loader) {
  const checkpoint::Metadata meta = checkpoint::read_metadata(step_dir);
  // Parameters load straight into the shards; optimizer state into fresh tensors of the shard's
  // shape for every state entry the checkpoint has.
  std::map<std::string, Shape> local_shape;
  for (const auto& [fqn, t] : model.params) local_shape[fqn] = t.local().shape();
  std::vector<std::pair<std::string, Tensor>> state =
      state_buffers(meta, local_shape, model.held_elsewhere, opt.state_tier());
  checkpoint::load(meta, model.chunks(state, /*for_save=*/false));
  opt.load_state_dict(state);
  return restore_trainer_state(meta, &loader);
}

}  // namespace hp::train
