#include "hp/data/shuffle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/data/files.h"

namespace hp::data {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'H', 'P', 'S', 'H', 'U', 'F', '0', '1'};
constexpr size_t kHeader = 48;  // magic + n, seed, epoch, seq_len, tokens

struct Header {
  int64_t n;
  uint64_t seed;
  int64_t epoch, seq_len, tokens;
};

void encode_header(unsigned char* p, const Header& h) {
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, &h, sizeof h);
}

bool header_matches(const detail::MappedFile& f, const Header& want) {
  if (f.size() != kHeader + 8 * static_cast<uint64_t>(want.n)) return false;
  Header got;
  std::memcpy(&got, f.data() + 8, sizeof got);
  return std::memcmp(f.data(), kMagic, 8) == 0 && got.n == want.n && got.seed == want.seed &&
         got.epoch == want.epoch;
}

// Writes the permutation to a private temp file, then renames it into place. False (and nothing
// left behind) when the directory or the file cannot be written.
bool write_index(const std::string& path, const Header& h) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return false;
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(std::random_device{}());
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const size_t bytes = kHeader + 8 * static_cast<size_t>(h.n);
  bool ok = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  void* p = ok ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ok = p != MAP_FAILED;
  if (ok) {
    auto* base = static_cast<unsigned char*>(p);
    encode_header(base, h);
    // kHeader is a multiple of 8: the ids are aligned.
    epoch_permutation_into(h.n, h.seed, h.epoch, reinterpret_cast<int64_t*>(base + kHeader));
    ::munmap(p, bytes);
    ok = ::fsync(fd) == 0;
  }
  ::close(fd);
  if (ok) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace

void epoch_permutation_into(int64_t n, uint64_t seed, int64_t epoch, int64_t* out) {
  std::iota(out, out + n, int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    auto w = philox4x32(static_cast<uint64_t>(i), static_cast<uint64_t>(epoch), seed);
    uint64_t r = (uint64_t{w[1]} << 32) | w[0];
    // j uniform in [0, i] by multiply-high (bias below (i + 1) / 2^64).
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
    std::swap(out[i], out[j]);
  }
}

std::string shuffle_index_path(const std::string& prefix, uint64_t seed, int64_t seq_len,
                               int64_t epoch) {
  return prefix + ".shuffle/seed" + std::to_string(seed) + "-len" + std::to_string(seq_len) +
         "-epoch" + std::to_string(epoch) + ".i64";
}

EpochOrder::EpochOrder(int64_t n, uint64_t seed, int64_t epoch)
    : n_(n), memory_(static_cast<size_t>(n)) {
  epoch_permutation_into(n, seed, epoch, memory_.data());
  data_ = memory_.data();
}

EpochOrder::EpochOrder(const std::string& prefix, int64_t tokens, int64_t seq_len, int64_t n,
                       uint64_t seed, int64_t epoch)
    : n_(n) {
  const std::string path = shuffle_index_path(prefix, seed, seq_len, epoch);
  const Header want{n, seed, epoch, seq_len, tokens};
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::error_code ec;
    if (fs::exists(path, ec)) {
      try {
        auto f = std::make_unique<detail::MappedFile>(path);
        if (header_matches(*f, want)) {
          data_ = reinterpret_cast<const int64_t*>(f->data() + kHeader);
          file_ = std::move(f);
          path_ = path;
          return;
        }
      } catch (const Error&) {
        // Unreadable: rewritten below, or computed in memory.
      }
    }
    if (attempt == 0 && !write_index(path, want)) break;
  }
  memory_.resize(static_cast<size_t>(n));
  epoch_permutation_into(n, seed, epoch, memory_.data());
  data_ = memory_.data();
}

EpochOrder::~EpochOrder() = default;

}  // namespace hp::data
