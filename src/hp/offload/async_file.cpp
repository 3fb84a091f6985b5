#include "hp/offload/async_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "hp/core/byte_size.h"
#include "hp/core/error.h"

namespace hp::offload {

namespace {
constexpr int64_t kChunk = int64_t(8) << 20;
}

AsyncFile::AsyncFile(std::string path, int threads) : path_(std::move(path)) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec)
    HP_THROW(IoError, "offload", "disk tier directory ", dir.string(),
             ": cannot create: ", ec.message(), " (memory.disk_dir)");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0)
    HP_THROW(IoError, "offload", path_,
             ": cannot create the disk tier's file: ", std::strerror(errno), " (memory.disk_dir)");
  old_sigxfsz_ = std::signal(SIGXFSZ, SIG_IGN);
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { worker(); });
}

AsyncFile::~AsyncFile() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return queue_.empty(); });
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  ::close(fd_);
  ::unlink(path_.c_str());
  if (old_sigxfsz_ != SIG_ERR) std::signal(SIGXFSZ, old_sigxfsz_);
}

AsyncFile::Ticket AsyncFile::submit(bool write, int64_t offset, char* ptr, int64_t bytes,
                                    std::shared_ptr<const void> keep) {
  Ticket t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    t = next_++;
    Pending& p = pending_[t];
    for (int64_t b = 0; b < bytes; b += kChunk) {
      queue_.push_back({t, write, offset + b, std::min(kChunk, bytes - b), ptr + b, keep});
      ++p.chunks;
    }
  }
  work_cv_.notify_all();
  return t;
}

AsyncFile::Ticket AsyncFile::write(int64_t offset, const void* src, int64_t bytes,
                                   std::shared_ptr<const void> keep) {
  return submit(true, offset, const_cast<char*>(static_cast<const char*>(src)), bytes,
                std::move(keep));
}

AsyncFile::Ticket AsyncFile::read(int64_t offset, void* dst, int64_t bytes,
                                  std::shared_ptr<void> keep) {
  return submit(false, offset, static_cast<char*>(dst), bytes, std::move(keep));
}

void AsyncFile::run(const Job& j) {
  int64_t done = 0;
  while (done < j.bytes) {
    const ssize_t n = j.write ? ::pwrite(fd_, j.ptr + done, size_t(j.bytes - done), j.offset + done)
                              : ::pread(fd_, j.ptr + done, size_t(j.bytes - done), j.offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "unexpected end of file";
      HP_THROW(IoError, "offload", path_, ": cannot ", j.write ? "write " : "read ", j.bytes,
               " bytes (", format_bytes(double(j.bytes)), ") at offset ", j.offset, ": ", why,
               j.write ? " (the disk tier, memory.disk_dir, is full or unwritable)" : "");
    }
    done += n;
  }
}

void AsyncFile::worker() {
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      j = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr err;
    try {
      run(j);
    } catch (...) {
      err = std::current_exception();
    }
    j.keep.reset();
    {
      std::lock_guard<std::mutex> lk(mu_);
      Pending& p = pending_[j.ticket];
      if (err && !p.error) p.error = err;
      --p.chunks;
      if (!err) (j.write ? stats_.bytes_written : stats_.bytes_read) += j.bytes;
    }
    done_cv_.notify_all();
  }
}

void AsyncFile::wait(Ticket t) {
  const auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] {
      auto it = pending_.find(t);
      return it == pending_.end() || it->second.chunks == 0;
    });
    if (auto it = pending_.find(t); it != pending_.end()) {
      err = it->second.error;
      pending_.erase(it);
    }
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (err) std::rethrow_exception(err);
}

AsyncFile::Stats AsyncFile::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

namespace {
// Whether process `pid` has ended: no such process (ESRCH; EPERM means it runs under another
// user), or a zombie its parent has not reaped yet (its files are as dead as its memory).
bool process_ended(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');  // the name in parentheses may hold spaces
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}
}  // namespace

std::string scratch_file_name(const std::string& what, int rank, const std::string& host,
                              long pid) {
  return what + "-rank" + std::to_string(rank) + "-" + host + "-pid" + std::to_string(pid) + ".bin";
}

int remove_files_of_dead_processes(const std::string& dir, const std::string& what,
                                   const std::string& host) {
  namespace fs = std::filesystem;
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const std::string head = what + "-rank", tail = "-" + host + "-pid";
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    // <what>-rank<digits><tail><digits>.bin, the host read as a whole (it may hold dashes).
    const std::string name = entry.path().filename().string();
    if (name.size() <= head.size() + tail.size() + 4 || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - 4, 4, ".bin") != 0)
      continue;
    const std::string_view mid(name.data() + head.size(), name.size() - head.size() - 4);
    const size_t at = mid.find(tail);
    if (at == std::string_view::npos || !digits(mid.substr(0, at)) ||
        !digits(mid.substr(at + tail.size())))
      continue;
    const auto pid = static_cast<pid_t>(std::stol(std::string(mid.substr(at + tail.size()))));
    if (pid > 0 && process_ended(pid) && fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace hp::offload
