// Subcommands of the `hp` tool. Each lives in its own file and returns the process exit code
// (0 ok, 2 bad usage or bad input); errors are reported by main as one line on stderr.
#pragma once

#include <string>
#include <vector>

namespace hp::cli {

using Args = std::vector<std::string>;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args& args);
};

// A usage error: main prints "hp <cmd>: <message>" and exits 2.
struct UsageError {
  std::string message;
};

int run_train(const Args& args);
int run_eval(const Args& args);
int run_mx(const Args& args);
int run_forward(const Args& args);
int run_generate(const Args& args);
int run_model(const Args& args);
int run_config(const Args& args);
int run_launch(const Args& args);
int run_ckpt(const Args& args);
int run_bench(const Args& args);
int run_bench_peak(const Args& args);     // hp bench peak (bench_peak.cpp)
int run_bench_offload(const Args& args);  // hp bench offload (bench_offload.cpp)
int run_data(const Args& args);
int run_memory(const Args& args);
int run_tokenize(const Args& args);

inline const std::vector<Command>& commands() {
  static const std::vector<Command> k = {
      {"train",
       "CONFIG.yaml [--set key=value ...] [--resume auto|PATH [--allow-config-change] | "
       "--overwrite] [--profile]: train a model as the config says",
       run_train},
      {"eval",
       "CONFIG.yaml --resume auto|PATH [--set key=value ...]: validation loss and perplexity of "
       "a checkpoint on the config's eval section",
       run_eval},
      {"config",
       "schema | show CONFIG.yaml [--set key=value ...]: the config schema, or the resolved YAML "
       "of a run config",
       run_config},
      {"data",
       "prepare INPUT... --out PREFIX [--tokenizer FILE | --model DIR] [--format text|jsonl|chat] "
       "[--workers N] ...: tokenize corpora into an indexed dataset (data.format: indexed) | "
       "info PREFIX [--verify]: what one holds, its largest token id",
       run_data},
      {"tokenize",
       "--tokenizer FILE_OR_DIR (--text STR | --file F) [--decode] [--add-special]: ids of each "
       "input line as a JSON array, or text of id arrays",
       run_tokenize},
      {"launch",
       "-n N [--hosts h1:2,h2:2 | --hostfile F] [--dry-run] -- CMD: run a command as N MPI "
       "ranks",
       run_launch},
      {"mx",
       "quantize | dequantize | stats --in X.f32 --shape R,C [--axis row|col] [--elem e4m3|e5m2] "
       "...: MXFP8 round trips on raw float32 files",
       run_mx},
      {"forward", "--model DIR --tokens FILE --out LOGITS.f32: logits of a HF model", run_forward},
      {"generate",
       "--model DIR --prompt TEXT [--max-new-tokens N] [--greedy | --temperature T "
       "--top-p P] [--seed S]",
       run_generate},
      {"model", "info DIR: architecture, parameter count and memory by dtype", run_model},
      {"memory",
       "plan CONFIG.yaml [--set key=value ...]: bytes per memory tier (params, grads, optimizer, "
       "activations) under the config's offload policy, and whether they fit memory.device_budget",
       run_memory},
      {"ckpt",
       "inspect DIR | verify DIR | export-hf DIR OUT [--max-shard-bytes N] [--overwrite] "
       "[--fp8-blocks]: distributed checkpoints (DIR: step or run dir; --fp8-blocks: FP8 E4M3 "
       "linear weights with a scale per 128x128 block, DeepSeek-V3's format)",
       run_ckpt},
      {"bench",
       "train [CONFIG] [--steps N] [--set k=v ...] [--no-peer | --peer-dtype bf16|f32|both]: "
       "training tokens/s and MFU beside PyTorch | peak [--remeasure] [--seconds S]: the GEMM "
       "peaks "
       "MFU divides by (--remeasure keeps the best of 3 new and the cached one) | offload [CONFIG] "
       "[--budget SIZE]: tokens/s with state on the host / disk tier against an unlimited budget",
       run_bench},
  };
  return k;
}

// --name value / --name=value parsing helpers for subcommands.
bool take_flag(Args& args, const std::string& name);
bool take_value(Args& args, const std::string& name, std::string* out);
long long parse_int(const std::string& flag, const std::string& value, long long lo, long long hi);
double parse_double(const std::string& flag, const std::string& value);
// Throws UsageError "unknown flag '--x'" for the first leftover that looks like a flag, else
// "unexpected argument 'x'" for the first leftover.
void reject_leftovers(const Args& args);
// Call first, before any required-flag check: throws UsageError "unknown flag '--reseum' (did you
// mean --resume?)" for the first argument that looks like a flag (-x, --x, --x=v; not "-5") and is
// none of `value_flags` (whose next argument, a value, is skipped) or `bool_flags`. Stops at "--".
void reject_unknown_flags(const Args& args, const std::vector<std::string>& value_flags,
                          const std::vector<std::string>& bool_flags = {});
// "1.50 MiB".
std::string human_bytes(double bytes);
// `s` as one /bin/sh word (single-quoted when it holds spaces or shell metacharacters).
std::string shell_quote(const std::string& s);

}  // namespace hp::cli
