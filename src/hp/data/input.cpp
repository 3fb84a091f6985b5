#include "hp/data/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "hp/core/error.h"

namespace hp::data::detail {

namespace {

// Compressed bytes read from the file per refill.
constexpr size_t kRawChunk = size_t{1} << 18;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string hex_prefix(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

}  // namespace

Compression compression_of(const std::string& path) {
  if (ends_with(path, ".gz")) return Compression::gzip;
  if (ends_with(path, ".zst")) return Compression::zstd;
  return Compression::none;
}

// The decoder state: raw_ holds compressed bytes read from the file, [raw_at_, raw_end_) unused.
struct InputStream::Codec {
  Compression kind;
  std::vector<unsigned char> raw = std::vector<unsigned char>(kRawChunk);
  size_t raw_at = 0, raw_end = 0;
  uint64_t raw_consumed = 0;  // file bytes handed to the decoder
  bool eof = false;           // the file has no more bytes
  bool in_member = false;     // inside a gzip member / zstd frame (its end not yet decoded)
  z_stream z{};
  ZSTD_DStream* zstd = nullptr;
  ~Codec() {
    if (kind == Compression::gzip) inflateEnd(&z);
    if (zstd) ZSTD_freeDStream(zstd);
  }
};

InputStream::InputStream(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) HP_THROW(IoError, "data", "cannot open '", path_, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    HP_THROW(IoError, "data", "cannot stat '", path_, "': ", std::strerror(err));
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  const Compression kind = compression_of(path_);
  if (kind == Compression::none) return;
  codec_ = std::make_unique<Codec>();
  codec_->kind = kind;
  if (kind == Compression::gzip) {
    // 16 + MAX_WBITS: gzip framing only (a zlib or raw deflate stream in a .gz is an error).
    if (inflateInit2(&codec_->z, 16 + MAX_WBITS) != Z_OK) {
      codec_->kind = Compression::none;  // nothing to end
      ::close(fd_);
      HP_THROW(IoError, "data", "cannot start a gzip decoder for '", path_, "'");
    }
  } else {
    codec_->zstd = ZSTD_createDStream();
    if (!codec_->zstd || ZSTD_isError(ZSTD_initDStream(codec_->zstd))) {
      ::close(fd_);
      HP_THROW(IoError, "data", "cannot start a zstd decoder for '", path_, "'");
    }
  }
  // The magic bytes, so a mislabelled file fails by name rather than as "incorrect header".
  const unsigned char gzip_magic[] = {0x1f, 0x8b}, zstd_magic[] = {0x28, 0xb5, 0x2f, 0xfd};
  const unsigned char* magic = kind == Compression::gzip ? gzip_magic : zstd_magic;
  const size_t magic_size = kind == Compression::gzip ? 2 : 4;
  unsigned char head[4] = {};
  const ssize_t n = ::pread(fd_, head, magic_size, 0);
  if (n != static_cast<ssize_t>(magic_size) || std::memcmp(head, magic, magic_size) != 0) {
    ::close(fd_);
    HP_THROW(IoError, "data", "'", path_, "' is named as ",
             kind == Compression::gzip ? "gzip" : "zstd",
             " data but does not start with its magic ", hex_prefix(magic, magic_size), " (",
             n <= 0 ? std::string("the file is empty")
                    : "it starts with " + hex_prefix(head, static_cast<size_t>(n)),
             ")");
  }
}

InputStream::~InputStream() {
  codec_.reset();
  ::close(fd_);
}

uint64_t InputStream::file_position() const {
  return codec_ ? codec_->raw_consumed - (codec_->raw_end - codec_->raw_at) : position_;
}

size_t InputStream::read(char* dst, size_t n) {
  if (n == 0) return 0;
  if (!codec_) {
    for (;;) {
      const ssize_t got = ::read(fd_, dst, n);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) HP_THROW(IoError, "data", "cannot read '", path_, "': ", std::strerror(errno));
      position_ += static_cast<uint64_t>(got);
      return static_cast<size_t>(got);
    }
  }
  Codec& c = *codec_;
  size_t out = 0;
  while (out == 0) {
    if (c.raw_at == c.raw_end && !c.eof) {
      ssize_t got;
      do got = ::read(fd_, c.raw.data(), c.raw.size());
      while (got < 0 && errno == EINTR);
      if (got < 0) HP_THROW(IoError, "data", "cannot read '", path_, "': ", std::strerror(errno));
      c.raw_at = 0;
      c.raw_end = static_cast<size_t>(got);
      c.raw_consumed += static_cast<uint64_t>(got);
      c.eof = got == 0;
    }
    if (c.raw_at == c.raw_end) {  // end of file
      if (c.in_member)
        HP_THROW(IoError, "data", "'", path_, "' is truncated: its ",
                 c.kind == Compression::gzip ? "gzip member" : "zstd frame", " ends early (after ",
                 c.raw_consumed, " compressed bytes)");
      return 0;
    }
    const uint64_t at = file_position();
    if (c.kind == Compression::gzip) {
      c.z.next_in = c.raw.data() + c.raw_at;
      c.z.avail_in = static_cast<uInt>(c.raw_end - c.raw_at);
      c.z.next_out = reinterpret_cast<Bytef*>(dst);
      c.z.avail_out = static_cast<uInt>(std::min<size_t>(n, UINT32_MAX));
      c.in_member = true;
      const int rc = inflate(&c.z, Z_NO_FLUSH);
      c.raw_at = c.raw_end - c.z.avail_in;
      out = n - c.z.avail_out;
      if (rc == Z_STREAM_END) {
        // Another member may follow (gzip files concatenate); the next call starts it.
        c.in_member = false;
        inflateReset(&c.z);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        HP_THROW(IoError, "data", "'", path_, "' is not valid gzip data near compressed byte ", at,
                 ": ", c.z.msg ? c.z.msg : zError(rc));
      }
    } else {
      ZSTD_inBuffer in{c.raw.data() + c.raw_at, c.raw_end - c.raw_at, 0};
      ZSTD_outBuffer o{dst, n, 0};
      const size_t rc = ZSTD_decompressStream(c.zstd, &o, &in);
      if (ZSTD_isError(rc))
        HP_THROW(IoError, "data", "'", path_, "' is not valid zstd data near compressed byte ", at,
                 ": ", ZSTD_getErrorName(rc));
      c.raw_at += in.pos;
      out = o.pos;
      // 0: a frame ended and everything decoded is flushed; another frame may follow.
      c.in_member = rc != 0;
    }
  }
  position_ += out;
  return out;
}

void InputStream::skip(uint64_t n) {
  std::vector<char> sink(std::min<uint64_t>(n, kRawChunk * 4));
  while (n > 0) {
    const size_t got = read(sink.data(), std::min<uint64_t>(n, sink.size()));
    if (got == 0)
      HP_THROW(IoError, "data", "'", path_, "' ends at byte ", position_, ", before byte ",
               position_ + n, " (the file changed?)");
    n -= got;
  }
}

std::string read_input(const std::string& path) {
  InputStream in(path);
  std::string bytes;
  // An uncompressed file is read into its final size at once; compressed ones grow.
  if (compression_of(path) == Compression::none) bytes.reserve(in.file_size());
  std::vector<char> piece(size_t{1} << 20);
  for (size_t got; (got = in.read(piece.data(), piece.size())) > 0;)
    bytes.append(piece.data(), got);
  return bytes;
}

}  // namespace hp::data::detail
