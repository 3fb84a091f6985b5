// Distributed checkpoints (DCP, docs/ARCHITECTURE.md §4 "DCP layout"): parameters, optimizer state
// and trainer state saved by every rank in parallel, reloadable on any rank count and any sharding.
//
// On disk, <run_dir>/step-<N>/ (N zero-padded to 8 digits so names sort) holds
//   rank-<r>.safetensors  each rank's chunks (valid safetensors; key "<fqn>@<offsets>", e.g.
//                         "w@2,0"; a 0-d tensor is "<fqn>@"), fsynced;
//   metadata.json         per FQN: dtype, global shape and every saved piece (offsets, sizes, file,
//                         byte range, CRC32C); "trainer_state"; format version;
//   extra files           (config.json, tokenizer.json, ...) written by rank 0;
// and <run_dir>/latest holds "step-<N>". Commit protocol (a crash at any point leaves the previous
// checkpoint loadable): every file is written into step-<N>.partial/ first; after all ranks' data
// is durable rank 0 writes metadata.json there (temp + fsync + rename), fsyncs the directory,
// renames it to step-<N> (atomically exchanged with an existing step-<N>), fsyncs run_dir, then
// replaces `latest` (temp + rename). A directory without metadata.json is never a checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"

namespace hp::checkpoint {

// This rank's piece of one tensor: the box [offsets, offsets + local.shape) of a tensor of
// global_shape.
struct Chunk {
  // "model.layers.0.mlp.up_proj.weight", "state.<fqn>.exp_avg", "state.<fqn>.step"
  std::string fqn;
  // save: the data (any dtype, contiguous or not); load: destination, preallocated (any dtype).
  Tensor local;
  Shape global_shape;
  // Same rank as global_shape (empty for 0-d tensors).
  std::vector<int64_t> offsets;
  // Every rank holds the same full tensor: written once (by rank 0), loads anywhere.
  bool replicated = false;
};

struct SaveOptions {
  // Keep the newest K complete step-* dirs of run_dir (0 = all); the new one is never deleted.
  int64_t keep = 0;
  // (name, content) written into step-<N>/ by rank 0 (config.json, tokenizer.json, config.yaml).
  std::vector<std::pair<std::string, std::string>> extra_files;
};

// Collective over comm (nullptr = a single process): writes <run_dir>/step-<N>/ as described above
// and returns its path. trainer_state_json must be the text of a JSON object (rank 0's is saved).
// Errors on any rank (bad chunk, I/O failure) are raised on every rank, after the others have
// finished their part, so no rank is left waiting; the previous checkpoint stays intact.
std::string save(const std::string& run_dir, int64_t step, const std::vector<Chunk>& chunks,
                 const std::string& trainer_state_json, dist::Communicator* comm,
                 const SaveOptions& opt = {});

// The newest complete checkpoint of run_dir: follows `latest`, falls back to the highest step dir
// that has metadata.json; nullopt when there is none.
std::optional<std::string> find_latest(const std::string& run_dir);

// `dir` itself when it holds metadata.json, else find_latest(dir); IoError naming `dir` when
// neither is a checkpoint (lets users pass a run dir or a step dir).
std::string resolve_step_dir(const std::string& dir);

// One saved tensor: its dtype, global shape and the pieces that tile it.
struct TensorMeta {
  std::string fqn;
  DType dtype;
  Shape global_shape;
  struct Piece {
    std::vector<int64_t> offsets, sizes;
    std::string file;     // file name inside the step dir
    uint64_t begin, end;  // byte range in `file` (row-major, dtype)
    uint32_t crc32c;      // of those bytes
  };
  std::vector<Piece> pieces;
};

struct Metadata {
  int64_t step;
  int64_t world_size;               // ranks that saved it
  std::vector<TensorMeta> tensors;  // sorted by fqn
  std::string trainer_state_json;   // a JSON object
  std::string dir;                  // the step dir it was read from
};

// Reads <step_dir>/metadata.json with strict validation (version, types, unknown keys, piece
// bounds, byte ranges that match sizes × dtype, pieces that tile each tensor exactly); errors name
// metadata.json and the key at fault. The file protects itself: "metadata_crc32c" is the CRC32C
// of the canonical body (the document without that key, serialized as nlohmann::json::dump()
// writes it — io::JsonValue::dump with KeyOrder::sorted: compact, keys sorted), and a mismatch is
// an IoError naming metadata.json. Checkpoints written
// before the key existed have none and still load (unchecked).
Metadata read_metadata(const std::string& step_dir);

// Fills each chunk.local (preallocated by the caller, any dtype: converted from the saved dtype)
// from every saved piece intersecting its box, so a checkpoint saved on N ranks with any sharding
// loads on M ranks with any other. Verifies the CRC of every piece it reads (each once). Errors
// name the file and tensor: missing FQN, global-shape mismatch, part of the box not covered,
// checksum mismatch, truncated or missing file. Not collective; saved FQNs that no chunk asks for
// are ignored. A replicated chunk loads like any other (it must hold the full tensor). After an
// error the destinations' contents are unspecified (a piece is checked while it is copied).
void load(const std::string& step_dir, const std::vector<Chunk>& chunks);
// The same with metadata already read (to look at trainer state first, or load tensor by tensor).
void load(const Metadata& meta, const std::vector<Chunk>& chunks);

// One problem verify() found in a step dir.
struct Fault {
  std::string file;    // inside the step dir: "rank-00001.safetensors", "metadata.json"
  std::string tensor;  // the fqn whose piece is affected; "" when not about one tensor
  std::string what;    // "missing", "truncated: ...", "checksum mismatch ..."
};

// Checks a step dir without loading it: metadata.json reads (strictly, its own checksum included),
// every piece's file exists, every piece's byte range lies inside its file, and every piece's bytes
// match their CRC32C. Returns every fault found, in file order (empty: the checkpoint is intact);
// a metadata.json that does not read is one fault and nothing else can be checked. Reads every
// data file once (a full pass over the checkpoint); not collective.
std::vector<Fault> verify(const std::string& step_dir);

// "step-00000042".
std::string step_dir_name(int64_t step);

namespace detail {
// Testing only: called at named points of save() on every rank that reaches them — "staged"
// (staging dir ready), "data_written" (this rank's file durable), and on rank 0 only
// "metadata_written" (metadata.json in the staging dir, before the rename) and "published" (step
// dir renamed, before `latest` moves). A hook that throws simulates a crash there.
using SaveHook = std::function<void(const std::string& point, int rank)>;
void set_save_hook(SaveHook hook);
}  // namespace detail

}  // namespace hp::checkpoint
