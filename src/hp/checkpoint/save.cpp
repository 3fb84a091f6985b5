// DCP save: every rank writes its chunks, rank 0 commits (metadata, rename, `latest`, pruning).
// The commit protocol is described in dcp.h.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <set>

#include "hp/checkpoint/crc32c.h"
#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/safetensors.h"

namespace hp::checkpoint {

namespace fs = std::filesystem;

namespace detail {
namespace {
SaveHook& save_hook() {
  static SaveHook hook;
  return hook;
}
}  // namespace
void set_save_hook(SaveHook hook) {
  save_hook() = std::move(hook);
}
}  // namespace detail

namespace {

void at_point(const char* point, int rank) {
  if (detail::save_hook()) detail::save_hook()(point, rank);
}

// Every rank's string, in rank order (collective; a world of one without comm).
std::vector<std::string> all_gather_strings(dist::Communicator* comm, const std::string& s) {
  if (!comm) return {s};
  const Tensor lens = comm->all_gather(from_data<int64_t>({static_cast<int64_t>(s.size())}, {1}));
  std::vector<int64_t> counts(lens.data<int64_t>(), lens.data<int64_t>() + comm->size());
  Tensor mine = empty({static_cast<int64_t>(s.size())}, DType::u8);
  if (!s.empty()) std::memcpy(mine.raw_data(), s.data(), s.size());
  const Tensor all = comm->all_gather_v(mine, counts);
  std::vector<std::string> out;
  const char* p = static_cast<const char*>(all.raw_data());
  for (int64_t n : counts) {
    out.emplace_back(p, static_cast<size_t>(n));
    p += n;
  }
  return out;
}

// Runs this rank's part of one save phase, then shares every rank's outcome, so a failure on one
// rank ends the save on all of them instead of leaving the others blocked in the next collective.
// Returns every rank's result; on failure the failing rank rethrows its own exception and the
// others throw an IoError naming it.
std::vector<std::string> run_phase(dist::Communicator* comm, const std::string& step_dir,
                                   const std::function<std::string()>& part) {
  std::string result;
  std::exception_ptr error;
  try {
    result = "+";
    result += part();
  } catch (const std::exception& e) {
    error = std::current_exception();
    result = "-";
    result += e.what();
  } catch (...) {
    error = std::current_exception();
    result = "-unknown exception";
  }
  std::vector<std::string> all = all_gather_strings(comm, result);
  if (error) std::rethrow_exception(error);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r][0] == '-')
      HP_THROW(IoError, "ckpt", step_dir, ": save failed on rank ", r, ": ", all[r].substr(1));
    all[r].erase(0, 1);
  }
  return all;
}

// "rank-00003.safetensors".
std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

// Writes this rank's chunks to `path` (fsynced) and returns their description for rank 0, as
// JSON: {"chunks": [{fqn, dtype, shape, offsets, sizes, replicated[, byte_range, crc32c]}]} (the
// last two for chunks this rank wrote: non-empty, and replicated ones only on rank 0).
std::string write_rank_file(const std::string& path, const std::vector<Chunk>& chunks, int rank) {
  std::vector<io::SafetensorsEntry> entries;
  std::map<std::string, size_t> index_of_key;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    detail::check_chunk(c);
    if (c.local.numel() == 0 || (c.replicated && rank != 0)) continue;
    const std::string key = c.fqn + "@" + detail::join_ints(c.offsets);
    if (!index_of_key.emplace(key, i).second)
      HP_THROW(ValueError, "ckpt", "chunk '", c.fqn, "' at offsets ", shape_str(c.offsets),
               " is given twice");
    entries.push_back({key, c.local.dtype(), c.local.shape(), nullptr, c.local.nbytes()});
  }

  std::vector<std::pair<uint64_t, uint64_t>> range(chunks.size());
  std::vector<uint32_t> crc(chunks.size());
  io::SafetensorsWriter writer(path, entries, {{"format", "hp-dcp"}});
  for (const auto& slot : writer.layout()) {
    const size_t i = index_of_key.at(slot.name);
    // Checksum and write block by block: the write then copies from cache, not memory.
    constexpr size_t kBlock = size_t(4) << 20;
    const Tensor data = chunks[i].local.contiguous();  // a copy only for strided chunks
    const auto* p = static_cast<const char*>(data.raw_data());
    uint32_t c = 0;
    for (size_t done = 0, n = data.nbytes(); done < n; done += kBlock) {
      const size_t len = std::min(kBlock, n - done);
      c = crc32c(p + done, len, c);
      writer.append(p + done, len);
    }
    range[i] = {slot.begin, slot.end};
    crc[i] = c;
  }
  writer.close(/*sync=*/true);

  io::JsonValue list = io::JsonValue::array();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    io::JsonValue j = io::JsonValue::object({{"fqn", c.fqn},
                                             {"dtype", dtype_name(c.local.dtype())},
                                             {"shape", c.global_shape},
                                             {"offsets", c.offsets},
                                             {"sizes", c.local.shape()},
                                             {"replicated", c.replicated}});
    if (range[i].second > range[i].first) {
      j["byte_range"] = io::JsonValue::array({range[i].first, range[i].second});
      j["crc32c"] = crc[i];
    }
    list.push_back(std::move(j));
  }
  return io::JsonValue::object({{"chunks", std::move(list)}}).dump(-1, io::KeyOrder::sorted);
}

// Rank 0: every rank's chunk descriptions → the checkpoint's tensors, checked for consistent dtype
// and shape across ranks and for pieces that tile each tensor exactly.
std::vector<TensorMeta> collect_tensors(const std::vector<std::string>& rank_chunks,
                                        const std::string& step_dir) {
  std::map<std::string, TensorMeta> tensors;
  std::map<std::string, int> declared_by;  // fqn → first rank that declared it
  std::set<std::string> replicated_on_0;
  for (size_t r = 0; r < rank_chunks.size(); ++r) {
    const io::Json list =
        io::parse_json(rank_chunks[r], "rank " + std::to_string(r) + " chunks").at("chunks");
    for (const io::Json& j : list.elements()) {
      const std::string fqn = j.get_string("fqn");
      const DType dt = dtype_from_name(j.get_string("dtype"));
      const Shape shape = j.at("shape").as_int_list();
      const bool replicated = j.get_bool("replicated");
      if (replicated && r == 0) replicated_on_0.insert(fqn);
      if (replicated && r != 0 && !replicated_on_0.count(fqn))
        HP_THROW(ValueError, "ckpt", step_dir, ": tensor '", fqn, "' is replicated on rank ", r,
                 " but rank 0 does not hold it (rank 0 writes replicated tensors)");
      auto [it, fresh] = tensors.try_emplace(fqn, TensorMeta{fqn, dt, shape, {}});
      if (fresh) declared_by[fqn] = static_cast<int>(r);
      TensorMeta& t = it->second;
      if (t.dtype != dt || t.global_shape != shape)
        HP_THROW(ValueError, "ckpt", step_dir, ": tensor '", fqn, "' is ", shape_str(shape), " ",
                 dtype_name(dt), " on rank ", r, " but ", shape_str(t.global_shape), " ",
                 dtype_name(t.dtype), " on rank ", declared_by[fqn]);
      if (!j.contains("byte_range")) continue;
      const std::string file = rank_file_name(static_cast<int>(r));
      t.pieces.push_back({j.at("offsets").as_int_list(), j.at("sizes").as_int_list(), file,
                          j.at("byte_range").at(0).as_uint(), j.at("byte_range").at(1).as_uint(),
                          static_cast<uint32_t>(j.get_uint("crc32c"))});
    }
  }
  std::vector<TensorMeta> out;
  for (auto& [fqn, t] : tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const TensorMeta::Piece& a, const TensorMeta::Piece& b) {
                return a.offsets < b.offsets;
              });
    try {
      detail::validate_tensor(t, step_dir);
    } catch (const IoError& e) {
      throw ValueError(e.what());  // the caller's sharding is at fault, not a file
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Step number of a directory name "step-<digits>", or -1.
int64_t parse_step_name(const std::string& name) {
  if (name.size() < 6 || name.size() > 5 + 18 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool is_complete(const fs::path& step_dir) {
  std::error_code ec;
  return fs::is_regular_file(step_dir / detail::kMetadataFile, ec);
}

// Complete checkpoints of run_dir by step, newest first.
std::vector<std::pair<int64_t, fs::path>> complete_steps(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const int64_t step = parse_step_name(e.path().filename().string());
    if (step >= 0 && is_complete(e.path())) out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

void check_extra_file_name(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      name == detail::kMetadataFile || name.rfind("rank-", 0) == 0)
    HP_THROW(ValueError, "ckpt", "extra file name '", name,
             "' must be a plain file name other than metadata.json and rank-*");
}

// Moves the finished staging dir to `final_dir`. An existing step dir of the same step (a re-save)
// is swapped atomically, so `latest` never names a missing or incomplete directory.
void publish(const fs::path& staging, const fs::path& final_dir) {
  if (std::rename(staging.c_str(), final_dir.c_str()) == 0) return;
  if (errno != ENOTEMPTY && errno != EEXIST)
    HP_THROW(IoError, "ckpt", final_dir.string(), ": cannot rename ", staging.string(),
             " to it: ", std::strerror(errno));
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
    HP_THROW(IoError, "ckpt", final_dir.string(), ": cannot exchange it with ", staging.string(),
             ": ", std::strerror(errno));
  std::error_code ec;
  fs::remove_all(staging, ec);  // now the replaced checkpoint
}

// Deletes complete checkpoints beyond the newest `keep` (never `new_step`; keep 0 keeps all) and
// stale staging dirs of interrupted saves (whatever `keep` says: a killed save's staging dir is
// never a checkpoint). Best effort: the new checkpoint is already committed.
void prune(const fs::path& run_dir, int64_t keep, int64_t new_step) {
  int64_t kept = 1;  // the new one
  for (const auto& [step, dir] : complete_steps(run_dir)) {
    if (keep <= 0) break;
    if (step == new_step) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec)
      std::fprintf(stderr, "[ckpt] warning: cannot delete old checkpoint %s: %s\n", dir.c_str(),
                   ec.message().c_str());
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto dot = name.rfind(".partial");
    if (dot != std::string::npos && dot + 8 == name.size() &&
        parse_step_name(name.substr(0, dot)) >= 0)
      fs::remove_all(e.path(), ec);
  }
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string save(const std::string& run_dir, int64_t step, const std::vector<Chunk>& chunks,
                 const std::string& trainer_state_json, dist::Communicator* comm,
                 const SaveOptions& opt) {
  const int rank = comm ? comm->rank() : 0;
  const int world = comm ? comm->size() : 1;
  const fs::path run(run_dir), final_dir = run / step_dir_name(step);
  const fs::path staging = run / (step_dir_name(step) + ".partial");
  const std::string where = final_dir.string();
  // A failed save leaves nothing behind: rank 0 removes the staging dir when any phase fails. Each
  // phase ends in a collective, so every rank is done writing into it by then, and the previous
  // checkpoint is never touched. (A killed save's staging dir goes at the next save's pruning.)
  struct RemoveStagingOnFailure {
    const fs::path& dir;
    bool armed;
    ~RemoveStagingOnFailure() {
      std::error_code ec;
      if (armed) fs::remove_all(dir, ec);
    }
  } cleanup{staging, rank == 0};

  // 1. Rank 0 checks the arguments and makes an empty staging dir.
  run_phase(comm, where, [&] {
    if (rank != 0) return std::string();
    if (step < 0) HP_THROW(ValueError, "ckpt", "step must be >= 0, got ", step);
    if (opt.keep < 0) HP_THROW(ValueError, "ckpt", "keep must be >= 0 (0 = all), got ", opt.keep);
    const auto state = io::try_parse_json(trainer_state_json, "trainer state");
    if (!state || !state->is_object())
      HP_THROW(ValueError, "ckpt",
               "trainer state must be a JSON object, got: ", trainer_state_json.substr(0, 80));
    for (const auto& [name, content] : opt.extra_files) check_extra_file_name(name);
    std::error_code ec;
    fs::create_directories(run, ec);
    if (ec) HP_THROW(IoError, "ckpt", run_dir, ": cannot create: ", ec.message());
    fs::remove_all(staging, ec);
    if (!ec) fs::create_directory(staging, ec);
    if (ec) HP_THROW(IoError, "ckpt", staging.string(), ": cannot create: ", ec.message());
    return std::string();
  });

  // 2. Every rank writes and fsyncs its data file.
  const std::string file = rank_file_name(rank);
  const auto rank_chunks = run_phase(comm, where, [&] {
    at_point("staged", rank);
    std::string desc = write_rank_file((staging / file).string(), chunks, rank);
    at_point("data_written", rank);
    return desc;
  });

  // 3. Rank 0 commits: metadata, rename, `latest`, pruning.
  run_phase(comm, where, [&] {
    if (rank != 0) return std::string();
    Metadata meta{step, world, collect_tensors(rank_chunks, where), trainer_state_json, where};
    for (const auto& [name, content] : opt.extra_files)
      detail::write_file_synced((staging / name).string(), content);
    // Atomic and durable, and it fsyncs the staging dir, making every rank's file entry durable.
    detail::write_file_atomic((staging / detail::kMetadataFile).string(),
                              detail::metadata_to_json(meta));
    at_point("metadata_written", rank);
    publish(staging, final_dir);
    detail::fsync_dir(run.string());
    at_point("published", rank);
    detail::write_file_atomic((run / detail::kLatestFile).string(), step_dir_name(step) + "\n");
    prune(run, opt.keep, step);
    return std::string();
  });
  cleanup.armed = false;
  return where;
}

std::optional<std::string> find_latest(const std::string& run_dir) {
  const fs::path run(run_dir);
  std::FILE* f = std::fopen((run / detail::kLatestFile).c_str(), "r");
  if (f) {
    char buf[64] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    std::string name(buf, n);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (parse_step_name(name) >= 0 && is_complete(run / name)) return (run / name).string();
  }
  const auto steps = complete_steps(run);
  if (steps.empty()) return std::nullopt;
  return steps.front().second.string();
}

std::string resolve_step_dir(const std::string& dir) {
  if (is_complete(dir)) return dir;
  if (auto latest = find_latest(dir)) return *latest;
  HP_THROW(IoError, "ckpt", dir,
           ": not a checkpoint (no metadata.json) and no complete step-* "
           "directory in it");
}

}  // namespace hp::checkpoint
