#include "hp/offload/activation_disk.h"

#include <exception>

#include "hp/core/error.h"

namespace hp::offload {

namespace {
constexpr int64_t kAlign = 4096;
int64_t rounded(int64_t bytes) {
  return (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

ActivationDisk::ActivationDisk(std::string path, int io_threads)
    : file_(std::move(path), io_threads) {}

int64_t ActivationDisk::allocate(int64_t bytes) {
  const int64_t n = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const int64_t off = it->first, left = it->second - n;
    free_.erase(it);
    if (left > 0) free_[off + n] = left;
    return off;
  }
  const int64_t off = end_;
  end_ += n;
  return off;
}

ActivationDisk::Extent ActivationDisk::write(const Tensor& src) {
  HP_CHECK(src.is_contiguous());
  Extent e;
  e.bytes = int64_t(src.nbytes());
  e.offset = allocate(e.bytes);
  e.write = file_.write(e.offset, src.raw_data(), e.bytes, src.storage());
  return e;
}

AsyncFile::Ticket ActivationDisk::read(Extent& e, const Tensor& dst) {
  HP_CHECK(e.offset >= 0 && int64_t(dst.nbytes()) == e.bytes && dst.is_contiguous());
  if (e.write != 0) {
    const AsyncFile::Ticket w = e.write;
    e.write = 0;
    try {
      file_.wait(w);
    } catch (...) {
      e.error = std::current_exception();  // every later read of the extent fails the same way
    }
  }
  if (e.error) std::rethrow_exception(e.error);  // a failed write is this step's error
  return file_.read(e.offset, dst.raw_data(), e.bytes, dst.storage());
}

void ActivationDisk::release(Extent& e) {
  if (e.offset < 0) return;
  if (e.write != 0) {
    // The space is reused only once nothing writes it any more.
    try {
      file_.wait(e.write);
    } catch (const std::exception&) {
    }
    e.write = 0;
  }
  int64_t off = e.offset, n = rounded(e.bytes);
  e.offset = -1;
  std::lock_guard<std::mutex> lock(mu_);
  // Merge with the neighbouring holes; a hole that reaches the end shrinks the file's extent.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + n) {
    n += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      n += prev->second;
      free_.erase(prev);
    }
  }
  if (off + n == end_)
    end_ = off;
  else
    free_[off] = n;
}

int64_t ActivationDisk::file_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_;
}

}  // namespace hp::offload
