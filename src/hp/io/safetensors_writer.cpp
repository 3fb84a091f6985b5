// safetensors writer.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/safetensors.h"

namespace hp::io {

namespace {

void check_entry(const std::string& path, const SafetensorsEntry& e) {
  if (e.name.empty() || e.name == "__metadata__")
    HP_THROW(IoError, "safetensors", path, ": invalid tensor name '", e.name, "'");
  uint64_t numel = 1;
  for (int64_t d : e.shape) {
    if (d < 0)
      HP_THROW(IoError, "safetensors", path, ": tensor '", e.name, "': negative dimension ", d);
    numel *= static_cast<uint64_t>(d);
  }
  if (numel * dtype_size(e.dtype) != e.nbytes)
    HP_THROW(IoError, "safetensors", path, ": tensor '", e.name, "': ", e.nbytes,
             " bytes given but shape × ", safetensors_dtype_name(e.dtype), " needs ",
             numel * dtype_size(e.dtype));
}

// write(2) until done (it may write less than asked, or be interrupted).
void write_all(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) HP_THROW(IoError, "safetensors", path, ": write failed: ", std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::string& path,
                                     const std::vector<SafetensorsEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path) {
  std::vector<const SafetensorsEntry*> order;
  std::set<std::string_view> seen;
  for (const SafetensorsEntry& e : tensors) {
    check_entry(path, e);
    if (!seen.insert(e.name).second)
      HP_THROW(IoError, "safetensors", path, ": duplicate tensor '", e.name, "'");
    order.push_back(&e);
  }
  // Largest element size first keeps every offset a multiple of its element size.
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  // Keys sorted, as the format's reference writer does.
  JsonValue header = JsonValue::object();
  if (!metadata.empty()) {
    JsonValue m = JsonValue::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry* e : order) {
    header[e->name] =
        JsonValue::object({{"dtype", safetensors_dtype_name(e->dtype)},
                           {"shape", e->shape},
                           {"data_offsets", JsonValue::array({offset, offset + e->nbytes})}});
    offset += e->nbytes;
  }
  std::string text = header.dump(-1, KeyOrder::sorted);
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t data_start = 8 + text.size();
  for (const SafetensorsEntry* e : order) {
    layout_.push_back({e->name, data_start + end_, data_start + end_ + e->nbytes});
    end_ += e->nbytes;
  }
  end_ += data_start;

  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) HP_THROW(IoError, "safetensors", path, ": cannot create: ", std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  write_all(fd_, path_, len, 8);
  write_all(fd_, path_, text.data(), text.size());
  pos_ = data_start;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::append(const void* data, size_t nbytes) {
  HP_CHECK(fd_ >= 0, path_, ": append after close");
  if (nbytes > end_ - pos_)
    HP_THROW(IoError, "safetensors", path_, ": ", nbytes, " bytes appended but only ", end_ - pos_,
             " left in the data region");
  if (nbytes > 0 && data == nullptr) HP_THROW(IoError, "safetensors", path_, ": null data");
  write_all(fd_, path_, data, nbytes);
  pos_ += nbytes;
}

void SafetensorsWriter::close(bool sync) {
  HP_CHECK(fd_ >= 0, path_, ": closed twice");
  const int fd = fd_;
  fd_ = -1;
  if (pos_ != end_) {
    ::close(fd);
    HP_THROW(IoError, "safetensors", path_, ": closed after ", pos_, " of ", end_, " bytes");
  }
  bool ok = !sync || ::fsync(fd) == 0;
  const int err = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok) HP_THROW(IoError, "safetensors", path_, ": close failed: ", std::strerror(err));
}

std::map<std::string, std::pair<uint64_t, uint64_t>> write_safetensors(
    const std::string& path, const std::vector<SafetensorsEntry>& tensors,
    const std::map<std::string, std::string>& metadata, bool sync) {
  SafetensorsWriter w(path, tensors, metadata);
  std::map<std::string_view, const SafetensorsEntry*> by_name;
  for (const SafetensorsEntry& e : tensors) by_name[e.name] = &e;
  std::map<std::string, std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& slot : w.layout()) {
    const SafetensorsEntry* e = by_name.at(slot.name);
    if (e->nbytes > 0 && e->data == nullptr)
      HP_THROW(IoError, "safetensors", path, ": tensor '", e->name, "': null data");
    w.append(e->data, e->nbytes);
    ranges[slot.name] = {slot.begin, slot.end};
  }
  w.close(sync);
  return ranges;
}

std::string hf_shard_file(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

std::string hf_index_json(const std::vector<std::pair<std::string, std::string>>& weight_map,
                          uint64_t total_bytes) {
  JsonValue index;
  index["metadata"] = JsonValue::object({{"total_size", total_bytes}});
  JsonValue map = JsonValue::object();
  for (const auto& [tensor, file] : weight_map) map[tensor] = file;
  index["weight_map"] = std::move(map);
  return index.dump(2) + "\n";
}

}  // namespace hp::io
