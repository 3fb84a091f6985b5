// The PyTorch peer of `hp bench train` (see bench_peer.h).
#include "bench_peer.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/models/hf/config.h"
#include "hp/train/setup.h"

namespace hp::cli {

namespace fs = std::filesystem;
using io::JsonValue;

namespace {

// The trainer's model for model.arch + sizes (train/setup's arch_model_config). vocab 0 takes the
// data's vocabulary, known here without reading the data only for byte-level text (256 ids + the
// separator).
models::ModelConfig arch_config(const train::Config& cfg) {
  const bool byte_level = cfg.data.format == train::DataFormat::text && cfg.data.tokenizer.empty();
  if (cfg.model.vocab == 0 && !byte_level)
    HP_THROW(ValueError, "bench", "model.vocab = 0 takes the vocabulary of the data (format ",
             enum_name(cfg.data.format), ", tokenizer '", cfg.data.tokenizer,
             "'); set it (--set model.vocab=N) so the peer builds the same model, or --no-peer");
  return train::arch_model_config(cfg.model, 257, cfg.training.seq_len, -1);
}

fs::path peers_dir() {
  if (const char* root = std::getenv("HP_SOURCE_DIR")) return fs::path(root) / "bench" / "peers";
  return HP_BENCH_PEERS_DIR;
}

PeerRun parse_result(PeerRun r, const std::string& out, int status) {
  std::string last;  // the last line that looks like the result object
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = std::min(out.find('\n', pos), out.size());
    if (out.compare(pos, 1, "{") == 0) last = out.substr(pos, end - pos);
    pos = end + 1;
  }
  if (status != 0 || last.empty()) {
    r.failed = true;
    r.note = status != 0 ? "peer exited with status " + std::to_string(status)
                         : "peer printed no result line";
    return r;
  }
  try {
    const io::Json j = io::parse_json(last, "the peer's result line");
    r.tokens_per_s = j.get_double("tokens_per_s");
    r.step_s = j.at("step_s").as_double_list();
    r.median_step_s = j.get_double("median_step_s");
    r.warmup_s = j.at("warmup_s").as_double_list();
    r.stable = j.get_bool("stable");
    r.loss_first = j.get_double("loss_first");
    r.loss_last = j.get_double("loss_last");
    r.num_parameters = j.get_int_or("num_parameters", 0);
    r.optimizer = j.get_string_or("optimizer", "");
    r.ran = true;
  } catch (const IoError& e) {
    r.failed = true;
    r.note = std::string("bad peer result line: ") + e.what();
  }
  return r;
}

}  // namespace

std::string peer_model_config_json(const train::Config& cfg) {
  if (cfg.optimizer.name != train::OptimizerName::adamw)
    HP_THROW(ValueError, "bench", "optimizer.name = '", enum_name(cfg.optimizer.name),
             "': the peer trains with AdamW only (use adamw, or --no-peer)");
  if (!cfg.model.path.empty()) {
    const fs::path dir(cfg.model.path);
    const std::string file = fs::is_directory(dir) ? (dir / "config.json").string() : cfg.model.path;
    return io::read_text_file(file, "bench");
  }
  return models::model_config_to_json(arch_config(cfg));
}

std::string peer_spec_json(const train::Config& cfg, const std::string& dtype,
                           const train::WarmupRule& rule, int threads) {
  const auto& o = cfg.optimizer;
  const auto& t = cfg.training;
  JsonValue j;
  j["config"] = io::parse_json_value(peer_model_config_json(cfg), "the peer's config.json");
  j["seq_len"] = t.seq_len;
  j["batch_size"] = t.batch_size;
  j["grad_accum"] = t.grad_accum;
  j["warmup"] = JsonValue::object({{"min_steps", rule.min_warmup},
                                   {"window", rule.window},
                                   {"tolerance", rule.tolerance},
                                   {"max_steps", rule.max_warmup}});
  j["timed_steps"] = rule.timed;
  j["lr"] = o.lr;
  j["betas"] = o.betas;
  j["eps"] = o.eps;
  j["weight_decay"] = o.weight_decay;
  j["grad_clip"] = t.grad_clip;
  j["threads"] = threads;
  j["dtype"] = dtype;
  j["seed"] = t.seed;
  return j.dump(2) + "\n";
}

std::string peer_python() {
  const char* py = std::getenv("HP_PEER_PYTHON");
  return py && *py ? py : "python3";
}

PeerRun run_train_peer(const train::Config& cfg, const std::string& dtype,
                       const train::WarmupRule& rule, int threads) {
  PeerRun r;
  r.dtype = dtype;
  const std::string py = peer_python();
  const std::string probe = shell_quote(py) + " -c 'import torch, transformers' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    r.note = "skipped: '" + py + "' cannot import torch and transformers (set HP_PEER_PYTHON)";
    return r;
  }
  fs::create_directories(cfg.run.dir);
  r.spec_path = (fs::path(cfg.run.dir) / ("peer_spec_" + dtype + ".json")).string();
  {
    std::ofstream f(r.spec_path);
    f << peer_spec_json(cfg, dtype, rule, threads);
    if (!f) HP_THROW(IoError, "bench", r.spec_path, ": cannot write the peer spec");
  }
  const std::string cmd = shell_quote(py) + " " +
                          shell_quote((peers_dir() / "train_peer.py").string()) + " " +
                          shell_quote(r.spec_path);
  std::fflush(stdout);
  FILE* f = popen(cmd.c_str(), "r");  // stdout = the result; stderr (progress) passes through
  if (!f) HP_THROW(IoError, "bench", "cannot run the peer: ", cmd);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = pclose(f);
  return parse_result(std::move(r), out, WIFEXITED(rc) ? WEXITSTATUS(rc) : 128);
}

}  // namespace hp::cli
