#include "hp/data/indexed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "hp/core/error.h"

namespace hp::data {

static_assert(std::endian::native == std::endian::little,
              "indexed datasets are little-endian and read without byte swapping");

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + counts 8 + 8
constexpr uint64_t kCountsAt = 18;
// Bytes buffered per output file before a write().
constexpr size_t kSinkBuffer = size_t{1} << 20;

// Index fields sit at odd offsets (the lengths start at 34): read them unaligned.
template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool valid_code(uint8_t code) {
  return code >= 1 && code <= 8;
}

std::string partial(const std::string& path) {
  return path + ".partial";
}

std::string docs_partial(const std::string& prefix) {
  return prefix + ".docs.partial";
}

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  HP_THROW(IoError, "data", "cannot ", what, " '", path, "': ", std::strerror(errno));
}

void fsync_dir_of(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability of the rename only; the data is already synced
  ::fsync(fd);
  ::close(fd);
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("write", path);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void pread_all(int fd, void* data, size_t bytes, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("read", path);
    if (n == 0) HP_THROW(IoError, "data", "'", path, "' ends before byte ", offset);
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

template <class T>
void widen(const unsigned char* src, int64_t count, int64_t* dst) {
  const T* s = reinterpret_cast<const T*>(src);  // aligned: .bin elements sit at k · sizeof(T)
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<int64_t>(s[i]);
}

}  // namespace

int64_t indexed_dtype_size(IndexedDType t) {
  switch (t) {
    case IndexedDType::u8:
    case IndexedDType::i8:
      return 1;
    case IndexedDType::i16:
    case IndexedDType::u16:
      return 2;
    case IndexedDType::i32:
    case IndexedDType::f32:
      return 4;
    case IndexedDType::i64:
    case IndexedDType::f64:
      return 8;
  }
  HP_CHECK(false, "unknown IndexedDType ", int(t));
  return 0;
}

const char* indexed_dtype_name(IndexedDType t) {
  switch (t) {
    case IndexedDType::u8:
      return "uint8";
    case IndexedDType::i8:
      return "int8";
    case IndexedDType::i16:
      return "int16";
    case IndexedDType::i32:
      return "int32";
    case IndexedDType::i64:
      return "int64";
    case IndexedDType::f64:
      return "float64";
    case IndexedDType::f32:
      return "float32";
    case IndexedDType::u16:
      return "uint16";
  }
  return "?";
}

IndexedDType indexed_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDType::u16 : IndexedDType::i32;
}

std::string indexed_idx_path(const std::string& prefix) {
  return prefix + ".idx";
}

std::string indexed_bin_path(const std::string& prefix) {
  return prefix + ".bin";
}

std::string indexed_mask_path(const std::string& prefix) {
  return prefix + ".mask.bin";
}

// ---- reading ----

IndexedDataset::IndexedDataset(std::string prefix)
    : prefix_(std::move(prefix)),
      idx_(indexed_idx_path(prefix_)),
      bin_(indexed_bin_path(prefix_)) {}

std::shared_ptr<const IndexedDataset> IndexedDataset::open(const std::string& prefix) {
  const std::string idx = indexed_idx_path(prefix), bin = indexed_bin_path(prefix);
  std::error_code ec;
  if (!fs::exists(idx, ec)) {
    if (fs::exists(partial(idx), ec))
      HP_THROW(IoError, "data", "indexed dataset '", prefix, "' is incomplete: '", idx,
               "' does not exist but '", partial(idx),
               "' does (an hp data prepare into it did not finish; run it again to resume)");
    HP_THROW(IoError, "data", "indexed dataset '", prefix, "': '", idx, "' does not exist",
             fs::exists(bin, ec) ? " (only the .bin is there: the dataset is incomplete)"
                                 : " (data.path of format indexed is the PREFIX of PREFIX.bin + "
                                   "PREFIX.idx)");
  }
  if (!fs::exists(bin, ec))
    HP_THROW(IoError, "data", "indexed dataset '", prefix, "': '", bin, "' does not exist beside '",
             idx, "'");
  std::shared_ptr<IndexedDataset> ds(new IndexedDataset(prefix));
  ds->validate();
  if (const std::string mask = indexed_mask_path(prefix); fs::exists(mask, ec)) {
    ds->mask_ = std::make_unique<detail::MappedFile>(mask);
    if (ds->mask_->size() != static_cast<uint64_t>(ds->num_tokens_))
      HP_THROW(IoError, "data", "'", mask, "' has ", ds->mask_->size(), " bytes but '", bin,
               "' holds ", ds->num_tokens_, " tokens: a loss mask has one byte per token (it ",
               "belongs to another dataset; remove it to train on every token)");
  }
  return ds;
}

void IndexedDataset::validate() {
  const std::string& idx = idx_.path();
  const std::string& bin = bin_.path();
  const unsigned char* p = idx_.data();
  const uint64_t size = idx_.size();
  if (size < kHeaderBytes)
    HP_THROW(IoError, "data", "'", idx, "' has ", size, " bytes, fewer than the ", kHeaderBytes,
             "-byte header of an indexed dataset index (truncated?)");
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    std::string got;
    for (size_t i = 0; i < sizeof kMagic; ++i) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", p[i]);
      got += buf;
    }
    HP_THROW(IoError, "data", "'", idx, "' does not start with the magic MMIDIDX\\x00\\x00 of a ",
             "Megatron indexed dataset index (found bytes ", got, ")");
  }
  if (const uint64_t version = load<uint64_t>(p + 9); version != kVersion)
    HP_THROW(IoError, "data", "'", idx, "' has index version ", version, "; only version ",
             kVersion, " exists");
  const uint8_t code = p[17];
  if (!valid_code(code))
    HP_THROW(IoError, "data", "'", idx, "' has dtype code ", int(code),
             ", not one of Megatron's codes 1-8 (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 "
             "float64, 7 float32, 8 uint16)");
  dtype_ = static_cast<IndexedDType>(code);
  const uint64_t seqs = load<uint64_t>(p + kCountsAt), bounds = load<uint64_t>(p + kCountsAt + 8);
  // The counts can be anything in a corrupt file: bound them by the file size before multiplying.
  const uint64_t room = size - kHeaderBytes;
  if (seqs > room / 12 || bounds > room / 8 || 12 * seqs + 8 * bounds > room)
    HP_THROW(IoError, "data", "'", idx, "' has ", size, " bytes, too few for its counts: ", seqs,
             " sequences and ", bounds, " document boundaries need ",
             (unsigned __int128)(kHeaderBytes) + (unsigned __int128)12 * seqs +
                         (unsigned __int128)8 * bounds >
                     std::numeric_limits<uint64_t>::max()
                 ? std::string("more than 2^64")
                 : std::to_string(kHeaderBytes + 12 * seqs + 8 * bounds),
             " (truncated?)");
  const uint64_t want = kHeaderBytes + 12 * seqs + 8 * bounds;
  if (size == want + seqs && seqs > 0)
    HP_THROW(IoError, "data", "'", idx, "' has ", seqs,
             " trailing sequence modes (a multimodal Megatron dataset); only token datasets are "
             "supported");
  if (size != want)
    HP_THROW(IoError, "data", "'", idx, "' has ", size, " bytes but its counts (", seqs,
             " sequences, ", bounds, " document boundaries) make ", want);
  if (bounds < 1)
    HP_THROW(IoError, "data", "'", idx, "' has document count 0; an index holds at least the ",
             "boundary 0");
  num_sequences_ = static_cast<int64_t>(seqs);
  num_boundaries_ = static_cast<int64_t>(bounds);

  const int64_t elem = indexed_dtype_size(dtype_);
  const uint64_t bin_size = bin_.size();
  uint64_t end = 0;  // where the next sequence must start, in .bin bytes
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t len = sequence_length(i);
    const int64_t ptr = sequence_pointer(i);
    if (len < 0)
      HP_THROW(IoError, "data", "'", idx, "': sequence ", i, " has negative length ", len);
    if (ptr < 0 || static_cast<uint64_t>(ptr) != end)
      HP_THROW(IoError, "data", "'", idx, "': sequence ", i, " points at byte ", ptr,
               " of the .bin but ",
               i == 0
                   ? std::string("the first sequence starts at 0")
                   : "sequence " + std::to_string(i - 1) + " ends at byte " + std::to_string(end),
               " (pointers must be cumulative lengths × ", elem, " bytes)");
    end += static_cast<uint64_t>(len) * static_cast<uint64_t>(elem);
    if (end > bin_size)
      HP_THROW(IoError, "data", "'", bin, "' has ", bin_size, " bytes but sequence ", i, " of '",
               idx, "' ends at byte ", end, " (the .bin is truncated or belongs to another index)");
  }
  if (end != bin_size)
    HP_THROW(IoError, "data", "'", bin, "' has ", bin_size, " bytes but '", idx, "' describes ",
             end, " (", seqs, " sequences of ", indexed_dtype_name(dtype_),
             "): they do not belong together");
  num_tokens_ = static_cast<int64_t>(end / static_cast<uint64_t>(elem));

  int64_t prev = 0;
  for (int64_t d = 0; d < num_boundaries_; ++d) {
    const int64_t at = document_index(d);
    if ((d == 0 && at != 0) || at < prev || at > num_sequences_)
      HP_THROW(IoError, "data", "'", idx, "': document index ", d, " is ", at,
               d == 0 ? std::string(", expected 0")
                      : ", outside [" + std::to_string(prev) + ", " +
                            std::to_string(num_sequences_) + "] (indices never decrease)");
    prev = at;
  }
  if (prev != num_sequences_)
    HP_THROW(IoError, "data", "'", idx, "': the last document index is ", prev, ", not the ",
             "sequence count ", num_sequences_);
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  HP_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
  return load<int32_t>(idx_.data() + kHeaderBytes + 4 * static_cast<uint64_t>(i));
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  HP_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
  return load<int64_t>(idx_.data() + kHeaderBytes + 4 * static_cast<uint64_t>(num_sequences_) +
                       8 * static_cast<uint64_t>(i));
}

int64_t IndexedDataset::document_index(int64_t i) const {
  HP_CHECK(i >= 0 && i < num_boundaries_, "document boundary ", i, " of ", num_boundaries_);
  return load<int64_t>(idx_.data() + kHeaderBytes + 12 * static_cast<uint64_t>(num_sequences_) +
                       8 * static_cast<uint64_t>(i));
}

void IndexedDataset::read(int64_t begin, int64_t count, int64_t* dst) const {
  if (begin < 0 || count < 0 || begin > num_tokens_ - count)
    HP_THROW(ValueError, "data", "tokens [", begin, ", ", begin + count, ") of '", prefix_,
             "' are outside its ", num_tokens_, " tokens");
  const unsigned char* src = bin_.data() + begin * indexed_dtype_size(dtype_);
  switch (dtype_) {
    case IndexedDType::u8:
      return widen<uint8_t>(src, count, dst);
    case IndexedDType::i8:
      return widen<int8_t>(src, count, dst);
    case IndexedDType::i16:
      return widen<int16_t>(src, count, dst);
    case IndexedDType::u16:
      return widen<uint16_t>(src, count, dst);
    case IndexedDType::i32:
      return widen<int32_t>(src, count, dst);
    case IndexedDType::i64:
      return widen<int64_t>(src, count, dst);
    case IndexedDType::f32:
    case IndexedDType::f64:
      break;
  }
  HP_THROW(IoError, "data", "'", idx_.path(), "' holds ", indexed_dtype_name(dtype_),
           " elements, not token ids");
}

void IndexedDataset::read_mask(int64_t begin, int64_t count, uint8_t* dst) const {
  HP_CHECK(mask_ != nullptr, "read_mask without a mask");
  if (begin < 0 || count < 0 || begin > num_tokens_ - count)
    HP_THROW(ValueError, "data", "mask [", begin, ", ", begin + count, ") of '", prefix_,
             "' is outside its ", num_tokens_, " tokens");
  if (count == 0) return;
  std::memcpy(dst, mask_->data() + begin, static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    if (dst[i] > 1)
      HP_THROW(IoError, "data", "'", mask_->path(), "' byte ", begin + i, " is ", int(dst[i]),
               ", not 0 or 1");
}

std::vector<int64_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int64_t> out(static_cast<size_t>(sequence_length(i)));
  read(sequence_pointer(i) / indexed_dtype_size(dtype_), static_cast<int64_t>(out.size()),
       out.data());
  return out;
}

// ---- writing ----

// One partial output file and its write buffer.
struct IndexedDatasetWriter::Sink {
  std::string path;
  int fd = -1;
  std::string buf;
  ~Sink() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Opens `path` for writing: fresh (truncated to 0), or cut back to `keep` bytes (IoError if the
// file is shorter: it does not hold what the caller believes was made durable).
int open_sink(const std::string& path, std::optional<uint64_t> keep) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (keep ? 0 : O_CREAT | O_TRUNC), 0644);
  if (fd < 0) throw_errno(keep ? "reopen" : "create", path);
  if (keep) {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw_errno("stat", path);
    }
    if (static_cast<uint64_t>(st.st_size) < *keep) {
      ::close(fd);
      HP_THROW(IoError, "data", "cannot resume from '", path, "': it has ", st.st_size,
               " bytes, fewer than the ", *keep, " recorded as written");
    }
    if (::ftruncate(fd, static_cast<off_t>(*keep)) != 0 ||
        ::lseek(fd, static_cast<off_t>(*keep), SEEK_SET) < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      throw_errno("truncate", path);
    }
  }
  return fd;
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDType dtype,
                                           std::optional<Position> resume_at, bool with_mask)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  if (!valid_code(static_cast<uint8_t>(dtype)))
    HP_THROW(ValueError, "data", "unknown indexed dtype code ", int(dtype));
  bin_ = std::make_unique<Sink>();
  idx_ = std::make_unique<Sink>();
  docs_ = std::make_unique<Sink>();
  bin_->path = partial(indexed_bin_path(prefix_));
  idx_->path = partial(indexed_idx_path(prefix_));
  docs_->path = docs_partial(prefix_);
  if (with_mask) {
    mask_ = std::make_unique<Sink>();
    mask_->path = partial(indexed_mask_path(prefix_));
  }
  const uint64_t elem = static_cast<uint64_t>(indexed_dtype_size(dtype_));
  if (resume_at) {
    const Position& r = *resume_at;
    if (r.tokens < 0 || r.sequences < 0 || r.documents < 0)
      HP_THROW(ValueError, "data", "cannot resume '", prefix_, "' at a negative position");
    bin_->fd = open_sink(bin_->path, static_cast<uint64_t>(r.tokens) * elem);
    idx_->fd = open_sink(idx_->path, kHeaderBytes + 4 * static_cast<uint64_t>(r.sequences));
    docs_->fd = open_sink(docs_->path, 8 * (static_cast<uint64_t>(r.documents) + 1));
    if (mask_) mask_->fd = open_sink(mask_->path, static_cast<uint64_t>(r.tokens));
    pos_ = r;
    return;
  }
  bin_->fd = open_sink(bin_->path, std::nullopt);
  idx_->fd = open_sink(idx_->path, std::nullopt);
  docs_->fd = open_sink(docs_->path, std::nullopt);
  if (mask_) mask_->fd = open_sink(mask_->path, std::nullopt);
  // The header, with the counts patched in at finish().
  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  std::memcpy(header + 9, &kVersion, 8);
  header[17] = static_cast<uint8_t>(dtype_);
  put(*idx_, header, sizeof header);
  const int64_t zero = 0;  // the first document boundary
  put(*docs_, &zero, 8);
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::put(Sink& s, const void* data, size_t bytes) {
  if (s.buf.size() + bytes > kSinkBuffer) {
    write_out(s);
    if (bytes > kSinkBuffer) return write_all(s.fd, data, bytes, s.path);
  }
  s.buf.append(static_cast<const char*>(data), bytes);
}

std::vector<IndexedDatasetWriter::Sink*> IndexedDatasetWriter::sinks() const {
  std::vector<Sink*> out{bin_.get(), idx_.get(), docs_.get()};
  if (mask_) out.push_back(mask_.get());
  return out;
}

void IndexedDatasetWriter::put_mask(size_t tokens, const void* mask, size_t bytes) {
  if (!mask_) {
    HP_CHECK(bytes == 0, "a mask given to a writer without with_mask");
    return;
  }
  if (bytes != tokens)
    HP_THROW(ValueError, "data", "a loss mask of ", bytes, " bytes for ", tokens, " tokens");
  put(*mask_, mask, bytes);
}

void IndexedDatasetWriter::write_out(Sink& s) {
  write_all(s.fd, s.buf.data(), s.buf.size(), s.path);
  s.buf.clear();
}

void IndexedDatasetWriter::encode_ids(std::span<const int32_t> ids, IndexedDType dtype,
                                      std::string& out) {
  int64_t lo = 0, hi = 0;
  switch (dtype) {
    case IndexedDType::u8:
      lo = 0, hi = UINT8_MAX;
      break;
    case IndexedDType::i8:
      lo = INT8_MIN, hi = INT8_MAX;
      break;
    case IndexedDType::i16:
      lo = INT16_MIN, hi = INT16_MAX;
      break;
    case IndexedDType::u16:
      lo = 0, hi = UINT16_MAX;
      break;
    case IndexedDType::i32:
    case IndexedDType::i64:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    case IndexedDType::f32:
    case IndexedDType::f64:
      HP_THROW(ValueError, "data", "token ids are written as integers, not ",
               indexed_dtype_name(dtype));
  }
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < lo || ids[i] > hi)
      HP_THROW(ValueError, "data", "token id ", ids[i], " (element ", i, ") does not fit ",
               indexed_dtype_name(dtype));
  const size_t elem = static_cast<size_t>(indexed_dtype_size(dtype));
  const size_t at = out.size();
  out.resize(at + ids.size() * elem);
  char* dst = out.data() + at;
  auto store = [&]<class T>(T) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const T v = static_cast<T>(ids[i]);
      std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
    }
  };
  switch (dtype) {
    case IndexedDType::u8:
      return store(uint8_t{});
    case IndexedDType::i8:
      return store(int8_t{});
    case IndexedDType::i16:
      return store(int16_t{});
    case IndexedDType::u16:
      return store(uint16_t{});
    case IndexedDType::i32:
      return store(int32_t{});
    case IndexedDType::i64:
      return store(int64_t{});
    default:
      break;
  }
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> ids,
                                        std::span<const int32_t> sequence_lengths,
                                        std::span<const uint8_t> mask) {
  HP_CHECK(!done_, "add_document after finish");
  int64_t sum = 0;
  for (int32_t n : sequence_lengths) {
    if (n < 0) HP_THROW(ValueError, "data", "sequence length ", n, " is negative");
    sum += n;
  }
  if (!sequence_lengths.empty() && sum != static_cast<int64_t>(ids.size()))
    HP_THROW(ValueError, "data", "sequence lengths sum to ", sum, " but the document has ",
             ids.size(), " ids");
  if (sequence_lengths.empty() && ids.size() > static_cast<size_t>(INT32_MAX))
    HP_THROW(ValueError, "data", "a document of ", ids.size(),
             " tokens does not fit one sequence (int32 lengths)");
  std::string encoded;
  encode_ids(ids, dtype_, encoded);
  put_mask(ids.size(), mask.data(), mask.size());
  put(*bin_, encoded.data(), encoded.size());
  pos_.tokens += static_cast<int64_t>(ids.size());
  if (sequence_lengths.empty() && !ids.empty()) {
    const int32_t n = static_cast<int32_t>(ids.size());
    put(*idx_, &n, 4);
    ++pos_.sequences;
  } else {
    put(*idx_, sequence_lengths.data(), 4 * sequence_lengths.size());
    pos_.sequences += static_cast<int64_t>(sequence_lengths.size());
  }
  put(*docs_, &pos_.sequences, 8);
  ++pos_.documents;
}

void IndexedDatasetWriter::add_encoded_documents(std::string_view encoded,
                                                 std::span<const int32_t> lengths,
                                                 std::string_view mask) {
  HP_CHECK(!done_, "add_encoded_documents after finish");
  int64_t sum = 0;
  for (int32_t n : lengths) sum += n;
  HP_CHECK(sum * indexed_dtype_size(dtype_) == static_cast<int64_t>(encoded.size()),
           "encoded bytes ", encoded.size(), " vs lengths summing to ", sum);
  put_mask(static_cast<size_t>(sum), mask.data(), mask.size());
  put(*bin_, encoded.data(), encoded.size());
  put(*idx_, lengths.data(), 4 * lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    ++pos_.sequences;
    put(*docs_, &pos_.sequences, 8);
  }
  pos_.tokens += sum;
  pos_.documents += static_cast<int64_t>(lengths.size());
}

IndexedDatasetWriter::Position IndexedDatasetWriter::flush() {
  for (Sink* s : sinks()) {
    write_out(*s);
    if (::fsync(s->fd) != 0) throw_errno("sync", s->path);
  }
  return pos_;
}

void IndexedDatasetWriter::finish() {
  HP_CHECK(!done_, "finish twice");
  for (Sink* s : sinks()) write_out(*s);
  const uint64_t seqs = static_cast<uint64_t>(pos_.sequences);
  const uint64_t bounds = static_cast<uint64_t>(pos_.documents) + 1;
  const int64_t elem = indexed_dtype_size(dtype_);
  // Pointers from the lengths already in the index file, a chunk at a time: [S] i64.
  constexpr uint64_t kChunk = uint64_t{1} << 16;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  int64_t at = 0;
  for (uint64_t i = 0; i < seqs; i += kChunk) {
    const uint64_t n = std::min(kChunk, seqs - i);
    lengths.resize(n);
    pointers.resize(n);
    pread_all(idx_->fd, lengths.data(), 4 * n, kHeaderBytes + 4 * i, idx_->path);
    for (uint64_t k = 0; k < n; ++k) {
      pointers[k] = at;
      at += int64_t{lengths[k]} * elem;
    }
    put(*idx_, pointers.data(), 8 * n);
  }
  // Then the document indices from the side file: [D] i64.
  std::vector<char> piece(kSinkBuffer);
  for (uint64_t off = 0, total = 8 * bounds; off < total; off += piece.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece.size(), total - off));
    pread_all(docs_->fd, piece.data(), n, off, docs_->path);
    put(*idx_, piece.data(), n);
  }
  write_out(*idx_);
  unsigned char counts[16];
  std::memcpy(counts, &seqs, 8);
  std::memcpy(counts + 8, &bounds, 8);
  if (::pwrite(idx_->fd, counts, sizeof counts, kCountsAt) != static_cast<ssize_t>(sizeof counts))
    throw_errno("write", idx_->path);
  for (Sink* s : sinks())
    if (s != docs_.get() && ::fsync(s->fd) != 0) throw_errno("sync", s->path);
  // Publish: an old .idx goes first, so no moment pairs an old index with the new .bin.
  const std::string idx = indexed_idx_path(prefix_), bin = indexed_bin_path(prefix_);
  if (::unlink(idx.c_str()) != 0 && errno != ENOENT) throw_errno("remove", idx);
  // The mask before the .bin: a published .idx vouches for both (and no stale mask survives).
  const std::string mask = indexed_mask_path(prefix_);
  if (mask_) {
    if (::rename(mask_->path.c_str(), mask.c_str()) != 0) throw_errno("rename to " + mask, mask_->path);
  } else if (::unlink(mask.c_str()) != 0 && errno != ENOENT) {
    throw_errno("remove", mask);
  }
  if (::rename(bin_->path.c_str(), bin.c_str()) != 0) throw_errno("rename to " + bin, bin_->path);
  fsync_dir_of(bin);
  if (::rename(idx_->path.c_str(), idx.c_str()) != 0) throw_errno("rename to " + idx, idx_->path);
  fsync_dir_of(idx);
  ::unlink(docs_->path.c_str());
  done_ = true;
}

void IndexedDatasetWriter::discard() {
  for (Sink* s : sinks()) {
    s->buf.clear();
    ::unlink(s->path.c_str());
  }
  done_ = true;
}

}  // namespace hp::data
