// Trainer state in DCP checkpoints (docs/ARCHITECTURE.md §4): parameter shards and optimizer state
// as chunks, trainer state (step, loader position, RNG) as JSON, and restoring all of it on any
// rank count.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hp/core/allocator.h"
#include "hp/core/tensor.h"

namespace hp::checkpoint {
struct Metadata;
}
namespace hp::data {
class DataLoader;
struct LoaderState;
}  // namespace hp::data
namespace hp::optim {
class Optimizer;
}

namespace hp::train {

struct Config;
struct Parallelized;

// {"step", "loader": {"epoch", "cursor"}, "rng": {"seed", "offset"}, "world_size"}.
std::string trainer_state_json(int64_t step, const data::LoaderState& loader, int world_size);

// The step directory `resume` names: "" → none; "auto" → the newest checkpoint of run_dir that
// passes checkpoint::verify (`latest` first, then by step), each newer one that fails being
// skipped with a line on `log` naming it and why, or "" when run_dir has none (ValueError when it
// has some but none verifies); a step directory; or a run directory's latest. Throws ValueError
// when PATH holds none. "auto" reads every candidate in full (a verify pass before the load).
std::string resolve_resume(const std::string& resume, const std::string& run_dir,
                           std::ostream* log = nullptr);

// A key whose value differs between the config a checkpoint was saved with and the run's.
struct ConfigChange {
  std::string path, was, is;  // "training.seq_len", "32", "64" (as the resolved YAML writes them)
  bool changes_math = false;  // resume_change(path) == ResumeChange::math (train/config.h)
  // "training.seq_len: 32 in the checkpoint, 64 now".
  std::string text() const;
};

// Every key, in schema order, whose value differs between `saved` and `now`.
std::vector<ConfigChange> config_changes(const Config& saved, const Config& now);

// Compares step_dir's config.yaml (parsed by parse_config) with `now` (config_changes) and logs
// every changed key with both values. When one of them changes the math, refuses to resume — a
// ValueError naming the file and listing each such key with both values — unless allow_change.
// A step dir without config.yaml (saved by something other than the trainer) is not checked.
void check_resume_config(const std::string& step_dir, const Config& now, bool allow_change,
                         std::ostream* log);

// What the trainer resumes from: resolve_resume(resume, cfg.run.dir, &log), then
// check_resume_config(that, cfg, allow_config_change, &log); "" = start fresh.
std::string resume_step_dir(const std::string& resume, bool allow_config_change, const Config& cfg,
                            std::ostream& log);

// The optimizer state a checkpoint holds, allocated for checkpoint::load and then
// Optimizer::load_state_dict: ("state.<fqn>.<name>", tensor) for every saved state entry, moments
// f32 of the parameter's local (shard) shape from `local_shape` in `tier`, step counters 0-d i64.
// Entries of parameters in `held_elsewhere` (other ranks' experts or stages) are skipped; any
// other parameter not in `local_shape` is a ValueError naming meta.dir.
std::vector<std::pair<std::string, Tensor>> state_buffers(
    const checkpoint::Metadata& meta, const std::map<std::string, Shape>& local_shape,
    const std::set<std::string>& held_elsewhere, MemTier tier);

// Moves `loader` (when not null) to the position meta's trainer state saved and the default
// generator to its RNG state; returns the saved step. ValueError naming metadata.json when the
// trainer state lacks step / loader / rng.
int64_t restore_trainer_state(const checkpoint::Metadata& meta, data::DataLoader* loader);

// Loads parameter shards, optimizer state, loader position and the default generator's RNG state
// from a step directory saved at any rank count; returns the step it was saved at.
// The parameters' pieces come from the parallelize step's descriptions (any layout loads).
int64_t restore(const std::string& step_dir, Parallelized& model, optim::Optimizer& opt,
                data::DataLoader& loader);

}  // namespace hp::train
