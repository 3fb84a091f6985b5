// Trainer state in DCP checkpoints (docs/ARCHITECTURE.md §4): parameter shards and optimizer state
// as chunks, trainer state (step, loader position, RNG) as JSON, and restoring all of it on any
// rank count.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hp::data {
class DataLoader;
struct LoaderState;
}  // namespace hp::data
namespace hp::optim {
class Optimizer;
}

namespace hp::train {

struct Parallelized;

// "state.<fqn>.<name>" → (fqn, name); throws ValueError for other keys.
std::pair<std::string, std::string> split_state_key(const std::string& key);

// {"step", "loader": {"epoch", "cursor"}, "rng": {"seed", "offset"}, "world_size"}.
std::string trainer_state_json(int64_t step, const data::LoaderState& loader, int world_size);

// The step directory `resume` names: "" → none; "auto" → run_dir's latest, or "" when it has
// none; a step directory; or a run directory's latest. Throws ValueError when PATH holds none.
std::string resolve_resume(const std::string& resume, const std::string& run_dir);

// Loads parameter shards, optimizer state, loader position and the default generator's RNG state
// from a step directory saved at any rank count; returns the step it was saved at.
// The parameters' pieces come from the parallelize step's descriptions (any layout loads).
int64_t restore(const std::string& step_dir, Parallelized& model, optim::Optimizer& opt,
                data::DataLoader& loader);

}  // namespace hp::train
