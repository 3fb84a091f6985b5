// Durable file writes for the DCP commit protocol: data reaches the disk (fsync) before anything
// that points at it is written.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"

namespace hp::checkpoint::detail {

namespace {

void fsync_path(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) HP_THROW(IoError, "ckpt", path, ": cannot open ", what, ": ", std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) HP_THROW(IoError, "ckpt", path, ": fsync failed: ", std::strerror(err));
}

}  // namespace

void write_file_synced(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) HP_THROW(IoError, "ckpt", path, ": cannot create: ", std::strerror(errno));
  const char* p = content.data();
  size_t n = content.size();
  bool ok = true;
  while (ok && n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    ok = k > 0;
    if (ok) p += k, n -= static_cast<size_t>(k);
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok) HP_THROW(IoError, "ckpt", path, ": write failed: ", std::strerror(err));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  write_file_synced(tmp, content);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    HP_THROW(IoError, "ckpt", path, ": cannot rename ", tmp, " over it: ", std::strerror(errno));
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

void fsync_dir(const std::string& dir) {
  fsync_path(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY, "directory");
}

}  // namespace hp::checkpoint::detail
