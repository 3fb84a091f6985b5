// CRC32C with the SSE4.2 crc32 instruction (this file alone is compiled with -msse4.2; callers
// check crc32c_hw_available() first). One dependent chain runs at ~8 bytes per 3 cycles, far above
// disk bandwidth, so the checksum adds little to a save or load.
#include <nmmintrin.h>

#include <cstring>

#include "hp/checkpoint/crc32c.h"

namespace hp::checkpoint::detail {

uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  for (; n >= 32; p += 32, n -= 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    c = _mm_crc32_u64(c, w[0]);
    c = _mm_crc32_u64(c, w[1]);
    c = _mm_crc32_u64(c, w[2]);
    c = _mm_crc32_u64(c, w[3]);
  }
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}

}  // namespace hp::checkpoint::detail
