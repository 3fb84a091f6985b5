// CRC32C: portable slicing-by-8 and the run-time choice of implementation.
#include "hp/checkpoint/crc32c.h"

#include <array>
#include <cstring>

#include "hp/kernels/cpu/isa.h"

namespace hp::checkpoint {

namespace detail {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli polynomial, bit-reflected

// kTable[k][b]: the CRC contribution of byte b followed by k zero bytes (slicing-by-8).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
};
const Tables kTables;

}  // namespace

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  const auto& t = kTables.t;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian host
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
  }
  for (; n > 0; ++p, --n) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return ~c;
}

bool crc32c_hw_available() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok = __builtin_cpu_supports("sse4.2");
  return ok;
#else
  return false;
#endif
}

}  // namespace detail

// The one ISA registry decides (HP_ISA=scalar selects the portable code for every kernel family,
// this one included); every x86 ISA above scalar implies SSE4.2.
uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const bool hw = kernels::active_isa() != kernels::Isa::scalar && detail::crc32c_hw_available();
  return hw ? detail::crc32c_sse42(data, n, crc) : detail::crc32c_portable(data, n, crc);
}

}  // namespace hp::checkpoint
