// Where an Optimizer keeps its state between steps: offload.optimizer (HyperOffload,
// docs/ARCHITECTURE.md §4c).
//
//   device  (none) the state is allocated in the device tier, like everything else.
//   host    the state lives in the host tier and the step runs there, in place (ZeRO-Offload's
//           CPU Adam, FSDP2's CPUOffloadPolicy): each step reads the device-tier gradients and
//           writes the updated f32 masters back — on an accelerator a device→host copy of the
//           gradients and a host→device copy of the parameters, which the transfer counts report.
//   disk    as host, but between steps the state lives in one file per rank (offload/
//           async_file.h) and is streamed per group (the parameters of one FSDP group): while
//           group g steps in host-tier buffers, group g+1 is read, and g is written back once
//           done (ZeRO-Infinity's pipelined optimizer swapper). The step ends when every write
//           is done, so a full disk fails the step that wrote, naming the file and the bytes.
// Placement never changes numerics: the same kernel runs on the same values, group by group
// (AdamW is elementwise; Muon's Newton–Schulz is per matrix).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hp/core/allocator.h"
#include "hp/optim/optimizer.h"

namespace hp::offload {
class AsyncFile;
}

namespace hp::optim {

enum class StatePlacement { device, host, disk };
// "none" | "host" | "disk"; ValueError naming offload.optimizer otherwise.
StatePlacement state_placement_from_name(std::string_view name);

struct StateOffloadOptions {
  StatePlacement placement = StatePlacement::device;
  // disk: parameters under each prefix ("model.layers.3" holds "model.layers.3.mlp...") are
  // streamed together; the rest (the root: embeddings, final norm, head) form the first group.
  std::vector<std::string> group_prefixes;
  std::string file;    // disk: the state file (created, deleted at the end)
  int io_threads = 4;  // disk: pread/pwrite workers
  // The masters / gradients already live in the host tier (offload.params / grads: FSDP counts
  // their transfers), so a host-side step moves none of them.
  bool params_on_host = false, grads_on_host = false;
};

// Bytes moved between tiers and the time the step waited for them.
struct TransferStats {
  int64_t device_to_host = 0, host_to_device = 0;  // host/disk: gradients down, masters up
  int64_t host_to_disk = 0, disk_to_host = 0;      // disk: state written back / read in
  double wait_s = 0;                               // blocked on disk reads and writes
};

class StateOffload {
 public:
  // `entries`: the optimizer's, whose state layout (one slot per parameter, sized by its shape and
  // algorithm) the file follows.
  StateOffload(const std::vector<Optimizer::Entry>& entries, StateOffloadOptions o);
  ~StateOffload();
  StateOffload(const StateOffload&) = delete;
  StateOffload& operator=(const StateOffload&) = delete;

  StatePlacement placement() const { return o_.placement; }
  MemTier tier() const { return MemTier::host; }
  // Entry indices stepped together, in step order (host: one group of all).
  const std::vector<std::vector<size_t>>& groups() const { return groups_; }

  // Starts reading group g's state into fresh host-tier tensors (disk; otherwise nothing).
  void prefetch(size_t g, const std::vector<Optimizer::Entry>& entries);
  // Waits for group g's reads and hands the tensors to its entries (every entry with step > 0
  // then holds its state).
  void acquire(size_t g, std::vector<Optimizer::Entry>& entries);
  // Group g is done. disk: writes its state back when `dirty` and drops the tensors.
  void release(size_t g, std::vector<Optimizer::Entry>& entries, bool dirty);
  // Waits for every write issued; throws the first write error (IoError naming file and bytes).
  void flush();
  // A step moved these bytes of gradients down and masters up (host and disk placements).
  void count_step(int64_t grad_bytes, int64_t param_bytes);
  TransferStats stats() const;

 private:
  struct Staged {
    std::vector<std::pair<size_t, std::vector<Tensor>>> tensors;  // entry → its state tensors
    std::vector<uint64_t> tickets;
    bool issued = false;
  };
  StateOffloadOptions o_;
  std::vector<std::vector<size_t>> groups_;
  std::vector<int64_t> offset_;  // disk: byte offset of each entry's state in the file
  std::vector<Staged> staged_;   // per group
  // Tickets of the groups being written back, oldest first. At most kWritesInFlight groups: the
  // host-tier buffers a write holds stay bounded (one group stepping, one read ahead, these).
  static constexpr size_t kWritesInFlight = 2;
  std::deque<std::vector<uint64_t>> writes_;
  std::unique_ptr<offload::AsyncFile> file_;
  TransferStats stats_;
};

}  // namespace hp::optim
