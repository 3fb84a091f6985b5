// safetensors reader: mapping, header validation, sharded checkpoints.
#include "hp/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/unicode.h"

namespace hp::io {

namespace detail {

// Owns the bytes (a mapping, or nothing for parse()) and the validated index into them.
struct SafetensorsState {
  std::string path;
  const std::byte* base = nullptr;
  size_t size = 0;
  void* mapping = nullptr;  // munmap'ed on destruction when set
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, size_t, std::less<>> by_name;
  std::map<std::string, std::string> metadata;

  SafetensorsState() = default;
  SafetensorsState(const SafetensorsState&) = delete;
  SafetensorsState& operator=(const SafetensorsState&) = delete;
  ~SafetensorsState() {
    if (mapping) ::munmap(mapping, size);
  }
};

}  // namespace detail

namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {
    {"F64", DType::f64},      {"F32", DType::f32},        {"BF16", DType::bf16},
    {"F16", DType::f16},      {"F8_E4M3", DType::f8e4m3}, {"F8_E5M2", DType::f8e5m2},
    {"F8_E8M0", DType::e8m0}, {"I64", DType::i64},        {"I32", DType::i32},
    {"U8", DType::u8},        {"BOOL", DType::boolean},
};
// Valid in the format but without an hp dtype: reported as unsupported rather than unknown.
constexpr std::string_view kForeignDTypes[] = {"I8",  "I16", "U16",     "U32",    "U64",
                                               "C64", "F4",  "F6_E2M3", "F6_E3M2"};

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Reads a non-negative integer from a JSON node; `what` names it in the error.
uint64_t json_uint(const JsonValue& v, const std::string& file, const std::string& tensor,
                   std::string_view what) {
  if (v.type() == JsonValue::Type::unsigned_integer) return v.as_uint();
  if (v.type() == JsonValue::Type::integer)
    HP_THROW(IoError, "safetensors", file, ": tensor '", tensor, "': negative ", what, " ",
             v.as_int());
  HP_THROW(IoError, "safetensors", file, ": tensor '", tensor, "': ", what,
           " must be a non-negative integer, got ", v.dump());
}

SafetensorsTensor parse_entry(const std::string& file, const std::string& name, const JsonValue& v,
                              const std::byte* data, uint64_t data_size, uint64_t data_start) {
  if (!v.is_object())
    HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': expected an object, got ",
             v.type_name());
  for (const auto& [key, value] : v.members())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': unexpected key '", key, "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key))
      HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': missing '", key, "'");

  SafetensorsTensor t;
  t.name = name;
  const JsonValue& dt = *v.find("dtype");
  if (!dt.is_string())
    HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': dtype must be a string, got ",
             dt.dump());
  t.dtype = [&] {
    try {
      return safetensors_dtype_from_name(dt.as_string());
    } catch (const IoError& e) {
      HP_THROW(IoError, "safetensors", file, ": tensor '", name,
               "': ", std::string_view(e.what()).substr(std::strlen("[safetensors] ")));
    }
  }();

  const JsonValue& shape = *v.find("shape");
  if (!shape.is_array())
    HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': shape must be an array, got ",
             shape.dump());
  uint64_t numel = 1;
  bool overflow = false, has_zero = false;
  for (const JsonValue& d : shape.elements()) {
    uint64_t n = json_uint(d, file, name, "dimension");
    if (n > static_cast<uint64_t>(INT64_MAX))
      HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': dimension ", n, " too large");
    if (n != 0 && numel > UINT64_MAX / n) overflow = true;
    has_zero = has_zero || n == 0;
    numel *= n;
    t.shape.push_back(static_cast<int64_t>(n));
  }
  // A zero dim makes an overflowing prefix product irrelevant.
  if (!has_zero && overflow)
    HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': element count overflows");

  const JsonValue& off = *v.find("data_offsets");
  if (!off.is_array() || off.size() != 2)
    HP_THROW(IoError, "safetensors", file, ": tensor '", name,
             "': data_offsets must be [begin, end], got ", off.dump());
  uint64_t begin = json_uint(off[0], file, name, "data offset");
  uint64_t end = json_uint(off[1], file, name, "data offset");
  if (end < begin)
    HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': data_offsets end ", end,
             " < begin ", begin);
  if (end > data_size)
    HP_THROW(IoError, "safetensors", file, ": tensor '", name, "': data_offsets [", begin, ", ",
             end, "] out of range of the ", data_size, "-byte data region");
  uint64_t esize = dtype_size(t.dtype);
  if (numel > UINT64_MAX / esize || numel * esize != end - begin)
    HP_THROW(
        IoError, "safetensors", file, ": tensor '", name, "': ", end - begin,
        " bytes in data_offsets but shape × ", safetensors_dtype_name(t.dtype), " needs ",
        numel > UINT64_MAX / esize ? std::string("more than 2^64") : std::to_string(numel * esize));
  t.data = data + begin;
  t.nbytes = static_cast<size_t>(end - begin);
  t.file_offset = data_start + begin;
  return t;
}

std::shared_ptr<detail::SafetensorsState> validate(std::shared_ptr<detail::SafetensorsState> st) {
  const std::string& file = st->path;
  if (st->size < 8)
    HP_THROW(IoError, "safetensors", file, ": file is ", st->size,
             " bytes, too small for the 8-byte header length");
  uint64_t n = read_le64(st->base);
  if (n > kSafetensorsMaxHeaderBytes)
    HP_THROW(IoError, "safetensors", file, ": header length ", n, " exceeds the ",
             kSafetensorsMaxHeaderBytes, "-byte limit");
  if (n > st->size - 8)
    HP_THROW(IoError, "safetensors", file, ": header length ", n, " exceeds the file size ",
             st->size, " - 8");
  std::string_view header(reinterpret_cast<const char*>(st->base) + 8, static_cast<size_t>(n));
  if (size_t bad = detail::find_invalid_utf8(header); bad != std::string_view::npos)
    HP_THROW(IoError, "safetensors", file, ": header is not valid UTF-8 (byte ", bad, ")");
  if (header.empty() || header[0] != '{')
    HP_THROW(IoError, "safetensors", file, ": header does not start with '{'");

  Json doc = [&] {
    try {
      return parse_json(header, file + " (header)");
    } catch (const IoError& e) {
      HP_THROW(IoError, "safetensors", file, ": invalid JSON header: ", e.what());
    }
  }();
  const JsonValue& root = doc.value();
  if (!root.is_object())
    HP_THROW(IoError, "safetensors", file, ": header must be a JSON object, got ",
             root.type_name());

  const std::byte* data = st->base + 8 + n;
  uint64_t data_size = st->size - 8 - n;
  for (const auto& [key, entry] : root.members()) {
    if (key == "__metadata__") {
      if (!entry.is_object())
        HP_THROW(IoError, "safetensors", file, ": __metadata__ must be an object, got ",
                 entry.type_name());
      for (const auto& [name, value] : entry.members()) {
        if (!value.is_string())
          HP_THROW(IoError, "safetensors", file, ": __metadata__ value of '", name,
                   "' must be a string, got ", value.dump());
        st->metadata.emplace(name, value.as_string());
      }
      continue;
    }
    st->tensors.push_back(parse_entry(file, key, entry, data, data_size, 8 + n));
  }

  // Offsets must tile [0, data_size) exactly: no overlap, no gap, no trailing bytes.
  auto& ts = st->tensors;
  std::sort(ts.begin(), ts.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
  });
  uint64_t expected = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : ts) {
    uint64_t begin = t.file_offset - 8 - n;
    if (begin < expected)
      HP_THROW(IoError, "safetensors", file, ": tensor '", t.name, "' at data offset ", begin,
               " overlaps tensor '", prev->name, "' ending at ", expected);
    if (begin > expected)
      HP_THROW(IoError, "safetensors", file, ": tensor '", t.name, "' starts at data offset ",
               begin, " leaving a gap after offset ", expected);
    expected = begin + t.nbytes;
    prev = &t;
  }
  if (expected != data_size)
    HP_THROW(IoError, "safetensors", file, ": tensors cover ", expected, " bytes of the ",
             data_size, "-byte data region");
  for (size_t i = 0; i < ts.size(); ++i) st->by_name.emplace(ts[i].name, i);
  return st;
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

DType safetensors_dtype_from_name(std::string_view name) {
  for (const DTypeName& d : kDTypes)
    if (d.name == name) return d.dtype;
  for (std::string_view f : kForeignDTypes)
    if (f == name) HP_THROW(IoError, "safetensors", "unsupported dtype '", name, "'");
  HP_THROW(IoError, "safetensors", "unknown dtype '", name, "'");
}

std::string_view safetensors_dtype_name(DType dt) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dt) return d.name;
  HP_CHECK(false, "no safetensors name for dtype ", dtype_name(dt));
  return {};
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) HP_THROW(IoError, "safetensors", path, ": cannot open: ", std::strerror(errno));
  struct stat sb;
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    HP_THROW(IoError, "safetensors", path, ": not a regular file");
  }
  auto st = std::make_shared<detail::SafetensorsState>();
  st->path = path;
  st->size = static_cast<size_t>(sb.st_size);
  if (st->size > 0) {
    void* p = ::mmap(nullptr, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      HP_THROW(IoError, "safetensors", path, ": mmap failed: ", std::strerror(err));
    st->mapping = p;
    st->base = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
  return SafetensorsFile(validate(std::move(st)));
}

SafetensorsFile SafetensorsFile::parse(const void* data, size_t size, std::string name) {
  auto st = std::make_shared<detail::SafetensorsState>();
  st->path = std::move(name);
  st->base = static_cast<const std::byte*>(data);
  st->size = size;
  return SafetensorsFile(validate(std::move(st)));
}

const std::string& SafetensorsFile::path() const {
  return state_->path;
}
const std::vector<SafetensorsTensor>& SafetensorsFile::tensors() const {
  return state_->tensors;
}
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return state_->metadata;
}
std::shared_ptr<const void> SafetensorsFile::keep_alive() const {
  return state_;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return state_->by_name.find(name) != state_->by_name.end();
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  auto it = state_->by_name.find(name);
  if (it == state_->by_name.end())
    HP_THROW(IoError, "safetensors", state_->path, ": no tensor '", name, "'");
  return state_->tensors[it->second];
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint ck;
  ck.source_ = path;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "model.safetensors.index.json", ec))
      p /= "model.safetensors.index.json";
    else if (fs::exists(p / "model.safetensors", ec))
      p /= "model.safetensors";
    else
      HP_THROW(IoError, "safetensors", path,
               ": directory has neither model.safetensors.index.json nor model.safetensors");
  }
  if (p.extension() != ".json") {
    ck.files_.push_back(SafetensorsFile::open(p.string()));
    for (const SafetensorsTensor& t : ck.files_[0].tensors()) ck.index_.emplace(t.name, &t);
    return ck;
  }

  Json index = read_json_file(p.string());
  Json weight_map = index.at("weight_map");
  std::map<std::string, size_t> shard_index;
  for (const auto& [tensor, shard_node] : weight_map.items()) {
    std::string shard = shard_node.as_string();
    // Shards live next to the index; refuse anything that would escape that directory.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      shard_node.fail("shard must be a plain file name, got \"" + shard + "\"");
    auto [it, inserted] = shard_index.emplace(shard, ck.files_.size());
    if (inserted) ck.files_.push_back(SafetensorsFile::open((p.parent_path() / shard).string()));
    const SafetensorsFile& f = ck.files_[it->second];
    if (!f.contains(tensor))
      HP_THROW(IoError, "safetensors", p.string(), ": weight_map lists tensor '", tensor, "' in ",
               f.path(), " which does not contain it");
    ck.index_.emplace(tensor, &f.tensor(tensor));
  }
  return ck;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, t] : index_) out.push_back(name);
  return out;
}

bool SafetensorsCheckpoint::contains(std::string_view name) const {
  return index_.find(name) != index_.end();
}

const SafetensorsTensor& SafetensorsCheckpoint::tensor(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) HP_THROW(IoError, "safetensors", source_, ": no tensor '", name, "'");
  return *it->second;
}

}  // namespace hp::io
