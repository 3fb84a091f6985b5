// libFuzzer target for the indexed-dataset reader (data/indexed.h): any PREFIX.idx, with a
// PREFIX.bin and an optional PREFIX.mask.bin of any size, either opens as a dataset whose every
// sequence, token and mask byte reads inside the mapped files, or fails with an hp::Error; never a
// crash, hang, leak or out-of-bounds read (ASan/UBSan enforce it).
//
// Input: u32 bin_size, u32 mask (0xFFFFFFFF: no mask file; else bit 30 = valid 0/1 bytes, the low
// 16 bits = its size), then the .idx bytes. The .bin holds bin_size (< 64 KiB) patterned bytes.
// Files go to a per-process directory under /dev/shm (or $TMPDIR), rewritten every input.
//
// Seeds (tests/fuzz/idx_seeds/): the indexed fixtures of tests/data (corpus, u16, i32) with this
// header and their .bin size, without a mask and (*_mask) with a valid one.
//
//   ./build-fuzz/hp_idx_fuzz -max_total_time=60 corpus/ tests/fuzz/idx_seeds/
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/data/indexed.h"

namespace {

const std::string& prefix() {
  static const std::string p = [] {
    std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    dir /= "hp_idx_fuzz_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    return (dir / "d").string();
  }();
  return p;
}

void write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint32_t bin_size = load_u32(data) & 0xFFFF, mask = load_u32(data + 4);
  const std::string& p = prefix();
  write(hp::data::indexed_idx_path(p), data + 8, size - 8);
  std::vector<uint8_t> bytes(bin_size);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  write(hp::data::indexed_bin_path(p), bytes.data(), bytes.size());
  const std::string mask_path = hp::data::indexed_mask_path(p);
  if (mask == 0xFFFFFFFFu) {
    std::filesystem::remove(mask_path);
  } else {
    bytes.assign(mask & 0xFFFF, 0);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(mask & 0x40000000u ? i & 1 : (i * 7) % 3);
    write(mask_path, bytes.data(), bytes.size());
  }
  try {
    const auto ds = hp::data::IndexedDataset::open(p);
    volatile int64_t sink = 0;
    // Every sequence through the index, then the whole stream in pieces, then the mask.
    for (int64_t s = 0; s < ds->num_sequences(); ++s)
      for (int64_t v : ds->sequence(s)) sink = sink + v;
    for (int64_t d = 0; d <= ds->num_documents(); ++d) sink = sink + ds->document_index(d);
    std::vector<int64_t> buf(257);
    std::vector<uint8_t> m(257);
    for (int64_t at = 0; at < ds->num_tokens(); at += 257) {
      const int64_t n = std::min<int64_t>(257, ds->num_tokens() - at);
      ds->read(at, n, buf.data());
      if (ds->has_mask()) {
        try {
          ds->read_mask(at, n, m.data());
        } catch (const hp::IoError&) {  // a byte other than 0 or 1
        }
      }
    }
    if (ds->has_mask() && static_cast<int64_t>(mask & 0xFFFF) != ds->num_tokens()) __builtin_trap();
  } catch (const hp::Error&) {
  }
  return 0;
}
