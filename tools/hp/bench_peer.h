// The PyTorch peer of `hp bench train`: bench/peers/train_peer.py trains the model the trainer
// builds from the same config (Hugging Face config.json, shapes, AdamW settings, threads) and
// reports its tokens/s. This file writes the peer's spec, runs it and reads its result line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/train/config.h"
#include "hp/train/step_timer.h"

namespace hp::cli {

// What one peer run reports (bench/peers/train_peer.py's JSON line).
struct PeerRun {
  std::string dtype;         // "bf16" (f32 weights, bf16 autocast) or "f32"
  bool ran = false;          // a result line was read
  bool failed = false;       // the peer could run (torch importable) but gave no result
  std::string note;          // why it did not run, or how it failed
  std::string spec_path;     // the spec it was given (rerun: python train_peer.py SPEC)
  double tokens_per_s = 0;     // tokens per step / the median timed step
  double median_step_s = 0;
  std::vector<double> step_s;    // the timed steps
  std::vector<double> warmup_s;  // the warm-up steps before them
  bool stable = false;           // warm-up ended by the rule, not by its cap
  double loss_first = 0, loss_last = 0;
  int64_t num_parameters = 0;
  std::string optimizer;     // "AdamW(fused)" or "AdamW(foreach)"
};

// The Hugging Face config.json object (as JSON text) of the model `cfg` trains: model.path's own
// config.json, or the one the trainer builds from model.arch and the size fields. Throws
// ValueError("[bench] ...") for what the peer cannot mirror (model.arch deepseek_v3, model.vocab 0
// with a tokenizer other than byte-level, optimizer.name muon).
std::string peer_model_config_json(const train::Config& cfg);

// The spec file text train_peer.py reads (see its docstring): the model, shapes and optimizer of
// cfg, and the warm-up and timing rule (train/step_timer.h) it applies as hp does.
std::string peer_spec_json(const train::Config& cfg, const std::string& dtype,
                           const train::WarmupRule& rule, int threads);

// $HP_PEER_PYTHON, else python3.
std::string peer_python();

// Writes the spec to <run.dir>/peer_spec_<dtype>.json and runs the peer; its progress goes to
// stderr. Does not throw when the peer is missing or fails: the result says so.
PeerRun run_train_peer(const train::Config& cfg, const std::string& dtype,
                       const train::WarmupRule& rule, int threads);

}  // namespace hp::cli
