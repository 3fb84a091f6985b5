#include "hp/data/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "hp/core/error.h"

namespace hp::data::detail {

namespace fs = std::filesystem;

std::vector<std::string> list_files(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) HP_THROW(IoError, "data", "dataset path '", path, "' does not exist");
  if (fs::is_regular_file(st)) return {path};
  if (!fs::is_directory(st))
    HP_THROW(IoError, "data", "dataset path '", path, "' is not a regular file or directory");
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(path, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  if (ec) HP_THROW(IoError, "data", "cannot list dataset directory '", path, "': ", ec.message());
  if (files.empty())
    HP_THROW(IoError, "data", "dataset directory '", path, "' contains no regular files");
  std::sort(files.begin(), files.end());
  return files;
}

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) HP_THROW(IoError, "data", "cannot open '", path_, "': ", std::strerror(errno));
}

InputFile::~InputFile() {
  ::close(fd_);
}

size_t InputFile::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    HP_THROW(IoError, "data", "cannot stat '", path_, "': ", std::strerror(errno));
  return static_cast<size_t>(st.st_size);
}

size_t InputFile::read_some(char* dst, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::read(fd_, dst + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) HP_THROW(IoError, "data", "cannot read '", path_, "': ", std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

void InputFile::read_exact(void* dst, size_t bytes) {
  size_t done = read_some(static_cast<char*>(dst), bytes);
  if (done != bytes)
    HP_THROW(IoError, "data", "cannot read '", path_, "': ended after ", done, " of ", bytes,
             " bytes");
}

std::string read_file(const std::string& path) {
  InputFile f(path);
  std::string bytes(f.size(), '\0');
  f.read_exact(bytes.data(), bytes.size());
  return bytes;
}

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) HP_THROW(IoError, "data", "cannot open '", path_, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    HP_THROW(IoError, "data", "cannot stat '", path_, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    HP_THROW(IoError, "data", "'", path_, "' is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      HP_THROW(IoError, "data", "cannot map '", path_, "' (", size_,
               " bytes): ", std::strerror(err));
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace hp::data::detail
