// The disk tier (HyperOffload, docs/ARCHITECTURE.md §4c): one scratch file read and written by a
// pool of pread/pwrite threads, so transfers run while the caller computes.
//
// Requests are split into chunks of at most 8 MiB spread over the threads; a ticket covers all of
// a request's chunks. Buffers are plain memory (no O_DIRECT: tensors are 64-byte aligned, not
// 4 KiB, and the page cache is what a pread/pwrite pool gets). Errors — a full disk, an
// unwritable directory, a file size limit (SIGXFSZ is ignored while a file is open, so such a
// write fails with EFBIG rather than killing the process) — are IoErrors naming the path, the
// offset and the bytes, raised by wait() on the caller's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hp::offload {

class AsyncFile {
 public:
  using Ticket = uint64_t;
  // Creates (truncating) `path`, its directory too. IoError naming them when that fails.
  AsyncFile(std::string path, int threads);
  // Waits for the requests in flight (their errors are dropped), closes and deletes the file.
  ~AsyncFile();
  AsyncFile(const AsyncFile&) = delete;
  AsyncFile& operator=(const AsyncFile&) = delete;

  // Queues a write of `bytes` from `src` at `offset`; `keep` holds src's owner until it is done.
  Ticket write(int64_t offset, const void* src, int64_t bytes, std::shared_ptr<const void> keep);
  // Queues a read of `bytes` at `offset` into `dst` (held by `keep` until done).
  Ticket read(int64_t offset, void* dst, int64_t bytes, std::shared_ptr<void> keep);
  // Blocks until the request is done; throws its IoError. Time blocked counts in wait_s.
  void wait(Ticket t);

  struct Stats {
    int64_t bytes_read = 0, bytes_written = 0;
    double wait_s = 0;  // the caller's time blocked in wait()
  };
  Stats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Job {
    Ticket ticket;
    bool write;
    int64_t offset, bytes;
    char* ptr;
    std::shared_ptr<const void> keep;
  };
  struct Pending {
    int chunks = 0;
    std::exception_ptr error;
  };
  Ticket submit(bool write, int64_t offset, char* ptr, int64_t bytes,
                std::shared_ptr<const void> keep);
  void worker();
  void run(const Job& j);

  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> queue_;
  std::map<Ticket, Pending> pending_;
  Ticket next_ = 1;
  bool stop_ = false;
  Stats stats_;
  void (*old_sigxfsz_)(int) = nullptr;
  std::vector<std::thread> threads_;
};

// The name of a process's scratch file: "<what>-rank<rank>-<host>-pid<pid>.bin". The host and pid
// tell a later run on this host whether its writer still runs (see below); the rank is for people.
std::string scratch_file_name(const std::string& what, int rank, const std::string& host, long pid);

// Removes the scratch files <dir>/<what>-rank<R>-<host>-pid<P>.bin, of any rank R, whose process P
// on this host no longer runs (a crashed run's: also those of ranks a resume at fewer ranks no
// longer has). Files of other hosts stay (their pids mean nothing here: a shared disk_dir), as do
// those of live processes (another run sharing the directory) and of reused pids: a leak, never a
// loss. Returns how many were removed.
int remove_files_of_dead_processes(const std::string& dir, const std::string& what,
                                   const std::string& host);

}  // namespace hp::offload
