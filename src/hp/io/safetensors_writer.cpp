// safetensors writer.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "hp/core/error.h"
#include "hp/io/safetensors.h"

namespace hp::io {

namespace {

class File {
 public:
  explicit File(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) HP_THROW(IoError, "safetensors", path, ": cannot create: ", std::strerror(errno));
  }
  ~File() {
    if (f_) std::fclose(f_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  void write(const void* p, size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, f_) != n)
      HP_THROW(IoError, "safetensors", path_, ": write failed: ", std::strerror(errno));
  }
  void close(bool sync) {
    bool ok = std::fflush(f_) == 0 && (!sync || ::fsync(::fileno(f_)) == 0);
    int err = errno;
    ok = std::fclose(f_) == 0 && ok;
    f_ = nullptr;
    if (!ok) HP_THROW(IoError, "safetensors", path_, ": close failed: ", std::strerror(err));
  }

 private:
  std::string path_;
  std::FILE* f_;
};

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
  if (e.nbytes > 0 && e.data == nullptr)
    HP_THROW(IoError, "safetensors", path, ": tensor '", e.name, "': null data");
}

}  // namespace

std::map<std::string, std::pair<uint64_t, uint64_t>> write_safetensors(
    const std::string& path, const std::vector<SafetensorsEntry>& tensors,
    const std::map<std::string, std::string>& metadata, bool sync) {
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

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry* e : order) {
    header[e->name] = {{"dtype", safetensors_dtype_name(e->dtype)},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + e->nbytes}}};
    offset += e->nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::map<std::string, std::pair<uint64_t, uint64_t>> ranges;
  uint64_t data_start = 8 + text.size();
  File f(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  f.write(len, 8);
  f.write(text.data(), text.size());
  uint64_t pos = data_start;
  for (const SafetensorsEntry* e : order) {
    f.write(e->data, e->nbytes);
    ranges[e->name] = {pos, pos + e->nbytes};
    pos += e->nbytes;
  }
  f.close(sync);
  return ranges;
}

}  // namespace hp::io
