// DCP load: intersect each wanted box with the saved pieces, verify each piece read once, copy the
// overlaps (converting dtype) into the caller's tensors.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "hp/checkpoint/crc32c.h"
#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"

namespace hp::checkpoint {

namespace {

// A data file mapped read-only. Pieces are checked against size() before any byte is touched, so
// a truncated file is an error rather than a SIGBUS.
struct Mapping {
  std::string path;
  const char* base = nullptr;
  uint64_t size = 0;
  ~Mapping() {
    if (base) ::munmap(const_cast<char*>(base), size);
  }
};

// `fqn` names the tensor whose piece needed the file, for the error.
std::shared_ptr<Mapping> map_file(const std::string& path, const std::string& fqn) {
  auto m = std::make_shared<Mapping>();
  m->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    HP_THROW(IoError, "ckpt", path, ": cannot open (needed for tensor '", fqn,
             "'): ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    HP_THROW(IoError, "ckpt", path, ": not a regular file (needed for tensor '", fqn, "')");
  }
  m->size = static_cast<uint64_t>(st.st_size);
  if (m->size > 0) {
    void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) HP_THROW(IoError, "ckpt", path, ": mmap failed: ", std::strerror(err));
    ::madvise(p, m->size, MADV_SEQUENTIAL);
    m->base = static_cast<const char*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

// One chunk's overlap with one piece: the box [off, off + len) in global coordinates.
struct Overlap {
  size_t chunk;
  std::vector<int64_t> off, len;
};

// Row-major element offset of global position `off` inside a box at `box_off` with `strides`.
int64_t offset_in(const std::vector<int64_t>& off, const std::vector<int64_t>& box_off,
                  const Shape& strides) {
  int64_t o = 0;
  for (size_t d = 0; d < off.size(); ++d) o += (off[d] - box_off[d]) * strides[d];
  return o;
}

}  // namespace

void load(const std::string& step_dir, const std::vector<Chunk>& chunks) {
  load(read_metadata(step_dir), chunks);
}

void load(const Metadata& meta, const std::vector<Chunk>& chunks) {
  const std::string meta_file = meta.dir + "/" + detail::kMetadataFile;
  std::map<std::string_view, const TensorMeta*> by_fqn;
  for (const TensorMeta& t : meta.tensors) by_fqn[t.fqn] = &t;

  // Plan: for every saved piece, the chunks it overlaps.
  std::map<const TensorMeta::Piece*, std::pair<const TensorMeta*, std::vector<Overlap>>> plan;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    detail::check_chunk(c);
    const auto it = by_fqn.find(c.fqn);
    if (it == by_fqn.end())
      HP_THROW(IoError, "ckpt", meta_file, ": no tensor '", c.fqn, "' in the checkpoint (it has ",
               meta.tensors.size(), " tensors)");
    const TensorMeta& t = *it->second;
    if (t.global_shape != c.global_shape)
      HP_THROW(IoError, "ckpt", meta_file, ": tensor '", c.fqn, "' has global shape ",
               shape_str(t.global_shape), " in the checkpoint but ", shape_str(c.global_shape),
               " was requested");
    int64_t covered = 0;
    Overlap o{i, {}, {}};
    for (const TensorMeta::Piece& p : t.pieces) {
      if (!detail::intersect(c.offsets, c.local.shape(), p.offsets, p.sizes, &o.off, &o.len))
        continue;
      covered += detail::box_numel(o.len);
      auto& entry = plan[&p];
      entry.first = &t;
      entry.second.push_back(o);
    }
    if (covered != c.local.numel())
      HP_THROW(IoError, "ckpt", meta_file, ": tensor '", c.fqn, "': the box at offsets ",
               shape_str(c.offsets), " sizes ", shape_str(c.local.shape()),
               " is not covered by the saved pieces (", covered, " of ", c.local.numel(),
               " elements)");
  }

  // Read file by file, in byte order, so each file is read front to back.
  std::vector<const TensorMeta::Piece*> order;
  for (const auto& [p, entry] : plan) order.push_back(p);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->file != b->file ? a->file < b->file : a->begin < b->begin;
  });
  std::shared_ptr<Mapping> file;
  for (const TensorMeta::Piece* p : order) {
    const auto& [t, overlaps] = plan.at(p);
    const std::string path = meta.dir + "/" + p->file;
    if (!file || file->path != path) file = map_file(path, t->fqn);
    if (file->size < p->end)
      HP_THROW(IoError, "ckpt", path, ": tensor '", t->fqn, "' piece at offsets ",
               shape_str(p->offsets), " needs bytes [", p->begin, ", ", p->end,
               ") but the file has ", file->size, " (truncated)");
    const char* bytes = file->base + p->begin;
    const size_t n = p->end - p->begin;
    if (n > 0) {  // start reading the whole piece ahead of the checksum pass
      static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
      ::madvise(const_cast<char*>(bytes - p->begin % page), n + p->begin % page, MADV_WILLNEED);
    }
    const uint32_t crc = crc32c(bytes, n);
    if (crc != p->crc32c)
      HP_THROW(IoError, "ckpt", path, ": tensor '", t->fqn, "' piece at offsets ",
               shape_str(p->offsets), " (bytes [", p->begin, ", ", p->end,
               ")): checksum mismatch (CRC32C ", crc, ", metadata says ", p->crc32c,
               "): the file is corrupted");
    // [sizes] of the saved dtype, row-major; the mapping outlives the copies below.
    const Tensor src = from_blob(const_cast<char*>(bytes), p->sizes, t->dtype, file);
    for (const Overlap& o : overlaps) {
      const Tensor& dst = chunks[o.chunk].local;
      dst.as_strided(o.len, dst.strides(),
                     dst.offset() + offset_in(o.off, chunks[o.chunk].offsets, dst.strides()))
          .copy_from(
              src.as_strided(o.len, src.strides(), offset_in(o.off, p->offsets, src.strides())));
    }
  }
}

}  // namespace hp::checkpoint
