// DCP load: intersect each wanted box with the saved pieces, verify each piece read once, copy the
// overlaps (converting dtype) into the caller's tensors.
#include <fcntl.h>
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

// One data file, read with pread() in large blocks. Pieces are checked against size() first, so a
// truncated file is reported as such.
class DataFile {
 public:
  // `fqn` names the tensor whose piece needed the file, for the error.
  DataFile(std::string path, const std::string& fqn) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      HP_THROW(IoError, "ckpt", path_, ": cannot open (needed for tensor '", fqn,
               "'): ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      HP_THROW(IoError, "ckpt", path_, ": not a regular file (needed for tensor '", fqn, "')");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~DataFile() { ::close(fd_); }
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads bytes [begin, begin + n) into dst and returns their CRC32C continuing `crc`, block by
  // block so each block is checksummed while still in cache.
  uint32_t read_into(uint64_t begin, size_t n, char* dst, uint32_t crc = 0) const {
    constexpr size_t kBlock = size_t(8) << 20;
    for (size_t done = 0; done < n;) {
      const ssize_t k =
          ::pread(fd_, dst + done, std::min(kBlock, n - done), static_cast<off_t>(begin + done));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) HP_THROW(IoError, "ckpt", path_, ": read failed: ", std::strerror(errno));
      crc = crc32c(dst + done, static_cast<size_t>(k), crc);
      done += static_cast<size_t>(k);
    }
    return crc;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

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
  std::unique_ptr<DataFile> file;
  std::vector<char> buffer;  // one slab of a piece that needs reshaping or conversion
  for (const TensorMeta::Piece* p : order) {
    const auto& [t, overlaps] = plan.at(p);
    const std::string path = meta.dir + "/" + p->file;
    if (!file || file->path() != path) file = std::make_unique<DataFile>(path, t->fqn);
    if (file->size() < p->end)
      HP_THROW(IoError, "ckpt", path, ": tensor '", t->fqn, "' piece at offsets ",
               shape_str(p->offsets), " needs bytes [", p->begin, ", ", p->end,
               ") but the file has ", file->size(), " (truncated)");
    const size_t n = p->end - p->begin;
    // The box [off, off + len) of chunk c's destination.
    auto dst_view = [&](size_t c, const std::vector<int64_t>& off, const Shape& len) {
      const Tensor& dst = chunks[c].local;
      return dst.as_strided(len, dst.strides(),
                            dst.offset() + offset_in(off, chunks[c].offsets, dst.strides()));
    };
    uint32_t crc = 0;
    const Overlap& o0 = overlaps[0];
    const Tensor direct =
        overlaps.size() == 1 && o0.len == p->sizes && chunks[o0.chunk].local.dtype() == t->dtype
            ? dst_view(o0.chunk, o0.off, o0.len)
            : Tensor();
    if (direct.defined() && direct.is_contiguous()) {
      // Fast path (a resume with the saved sharding): the piece lands unchanged in one contiguous
      // destination, so it is read there directly.
      crc = file->read_into(p->begin, n, static_cast<char*>(direct.raw_data()));
    } else {
      // The piece in slabs of whole dim-0 rows (~8 MiB, at least one row): read each into a
      // reused buffer, then copy its overlap with every destination (converting dtype).
      const int64_t row_bytes = p->sizes.empty()
                                    ? static_cast<int64_t>(n)
                                    : detail::box_numel({p->sizes.begin() + 1, p->sizes.end()}) *
                                          static_cast<int64_t>(dtype_size(t->dtype));
      const int64_t rows = p->sizes.empty() ? 1 : p->sizes[0];
      const int64_t per_slab =
          std::max<int64_t>(1, (int64_t(8) << 20) / std::max<int64_t>(row_bytes, 1));
      buffer.resize(static_cast<size_t>(std::min(rows, per_slab) * row_bytes));
      for (int64_t r0 = 0; r0 < rows; r0 += per_slab) {
        const int64_t r1 = std::min(rows, r0 + per_slab);
        const uint64_t at = p->begin + static_cast<uint64_t>(r0 * row_bytes);
        crc = file->read_into(at, static_cast<size_t>((r1 - r0) * row_bytes), buffer.data(), crc);
        std::vector<int64_t> slab_off = p->offsets;
        Shape slab_len = p->sizes;
        if (!slab_len.empty()) slab_off[0] += r0, slab_len[0] = r1 - r0;
        // [slab_len] of the saved dtype, row-major.
        const Tensor slab = from_blob(buffer.data(), slab_len, t->dtype, nullptr);
        std::vector<int64_t> off, len;
        for (const Overlap& o : overlaps)
          if (detail::intersect(o.off, o.len, slab_off, slab_len, &off, &len))
            dst_view(o.chunk, off, len)
                .copy_from(
                    slab.as_strided(len, slab.strides(), offset_in(off, slab_off, slab.strides())));
      }
    }
    if (crc != p->crc32c)
      HP_THROW(IoError, "ckpt", path, ": tensor '", t->fqn, "' piece at offsets ",
               shape_str(p->offsets), " (bytes [", p->begin, ", ", p->end,
               ")): checksum mismatch (CRC32C ", crc, ", metadata says ", p->crc32c,
               "): the file is corrupted");
  }
}

}  // namespace hp::checkpoint
