// `hp ckpt inspect DIR`, `hp ckpt verify DIR` and `hp ckpt export-hf DIR OUT`: DCP checkpoints
// from the command line. DIR is a step dir or a run dir (its latest checkpoint).
#include <cstdio>
#include <map>

#include "commands.h"
#include "hp/checkpoint/dcp.h"
#include "hp/checkpoint/export.h"
#include "hp/io/json.h"
#include "hp/models/hf/weights.h"

namespace hp::cli {

namespace {

int inspect(const std::string& dir) {
  const checkpoint::Metadata meta = checkpoint::read_metadata(checkpoint::resolve_step_dir(dir));
  std::printf("checkpoint %s\nstep %lld, saved by %lld rank(s), %zu tensors\n\n", meta.dir.c_str(),
              static_cast<long long>(meta.step), static_cast<long long>(meta.world_size),
              meta.tensors.size());
  uint64_t total = 0, state = 0;
  size_t pieces = 0;
  std::map<std::string, std::pair<size_t, uint64_t>> per_file;  // file → (pieces, bytes)
  for (const checkpoint::TensorMeta& t : meta.tensors) {
    uint64_t bytes = 0;
    for (const auto& p : t.pieces) bytes += p.end - p.begin;
    std::printf("%s  %s %s  %s\n", t.fqn.c_str(), std::string(dtype_name(t.dtype)).c_str(),
                shape_str(t.global_shape).c_str(), human_bytes(static_cast<double>(bytes)).c_str());
    for (const auto& p : t.pieces) {
      std::printf("    %-24s offsets %-12s sizes %-12s bytes [%llu, %llu)\n", p.file.c_str(),
                  shape_str(p.offsets).c_str(), shape_str(p.sizes).c_str(),
                  static_cast<unsigned long long>(p.begin), static_cast<unsigned long long>(p.end));
      auto& f = per_file[p.file];
      ++f.first;
      f.second += p.end - p.begin;
    }
    total += bytes;
    pieces += t.pieces.size();
    if (t.fqn.rfind("state.", 0) == 0) state += bytes;
  }
  std::printf("\nper file:\n");
  for (const auto& [file, f] : per_file)
    std::printf("  %-24s %zu pieces, %s\n", file.c_str(), f.first,
                human_bytes(static_cast<double>(f.second)).c_str());
  std::printf("total: %zu tensors, %zu pieces, %s (model %s, optimizer state %s)\n\n",
              meta.tensors.size(), pieces, human_bytes(static_cast<double>(total)).c_str(),
              human_bytes(static_cast<double>(total - state)).c_str(),
              human_bytes(static_cast<double>(state)).c_str());
  std::printf("trainer state:\n%s\n",
              io::parse_json(meta.trainer_state_json, "trainer state").dump(2).c_str());
  return 0;
}

// Every fault on its own line and exit 2, or one OK line and exit 0.
int verify(const std::string& dir) {
  const std::string step_dir = checkpoint::resolve_step_dir(dir);
  const std::vector<checkpoint::Fault> faults = checkpoint::verify(step_dir);
  for (const checkpoint::Fault& f : faults) {
    const std::string tensor = f.tensor.empty() ? "" : " (tensor '" + f.tensor + "')";
    std::printf("FAULT %s/%s%s: %s\n", step_dir.c_str(), f.file.c_str(), tensor.c_str(),
                f.what.c_str());
  }
  if (!faults.empty()) {
    std::printf("%s: %zu fault(s): the checkpoint is damaged\n", step_dir.c_str(), faults.size());
    return 2;
  }
  const checkpoint::Metadata meta = checkpoint::read_metadata(step_dir);
  size_t pieces = 0;
  uint64_t bytes = 0;
  std::map<std::string, int> files;
  for (const checkpoint::TensorMeta& t : meta.tensors)
    for (const auto& p : t.pieces) ++pieces, bytes += p.end - p.begin, ++files[p.file];
  std::printf(
      "OK %s: step %lld, %zu tensors, %zu pieces in %zu file(s), %s, every checksum matches\n",
      step_dir.c_str(), static_cast<long long>(meta.step), meta.tensors.size(), pieces,
      files.size(), human_bytes(static_cast<double>(bytes)).c_str());
  return 0;
}

}  // namespace

int run_ckpt(const Args& argv) {
  Args args = argv;
  if (args.empty()) throw UsageError{"expected 'inspect DIR', 'verify DIR' or 'export-hf DIR OUT'"};
  const std::string sub = args.front();
  args.erase(args.begin());
  reject_unknown_flags(args, {"--max-shard-bytes"}, {"--overwrite", "--fp8-blocks"});
  if (sub == "inspect") {
    if (args.size() != 1) throw UsageError{"usage: hp ckpt inspect DIR"};
    return inspect(args[0]);
  }
  if (sub == "verify") {
    if (args.size() != 1) throw UsageError{"usage: hp ckpt verify DIR"};
    return verify(args[0]);
  }
  if (sub == "export-hf") {
    std::string max_shard;
    int64_t max_bytes = 2'000'000'000;
    if (take_value(args, "--max-shard-bytes", &max_shard))
      max_bytes = parse_int("--max-shard-bytes", max_shard, 1, int64_t(1) << 50);
    const bool overwrite = take_flag(args, "--overwrite");
    // DeepSeek-V3's FP8 format: E4M3 linear weights with a scale per 128×128 block.
    std::optional<mx::Fp8BlockSize> fp8_blocks;
    if (take_flag(args, "--fp8-blocks")) fp8_blocks = mx::Fp8BlockSize{};
    if (args.size() != 2)
      throw UsageError{
          "usage: hp ckpt export-hf DIR OUT [--max-shard-bytes N] [--overwrite] [--fp8-blocks]"};
    const std::string step_dir = checkpoint::resolve_step_dir(args[0]);
    const auto stats = checkpoint::export_hf(step_dir, args[1], max_bytes, overwrite, fp8_blocks,
                                             models::checkpoint_names(step_dir));
    std::printf("exported %lld tensors (%s) from %s to %s in %lld shard(s)\n",
                static_cast<long long>(stats.tensors),
                human_bytes(static_cast<double>(stats.bytes)).c_str(), step_dir.c_str(),
                args[1].c_str(), static_cast<long long>(stats.shards));
    return 0;
  }
  throw UsageError{"unknown subcommand '" + sub + "' (expected inspect, verify or export-hf)"};
}

}  // namespace hp::cli
