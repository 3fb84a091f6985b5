// CRC32C: published check values (RFC 3720 B.4) for both implementations, and the hardware path
// against the portable one over every length and alignment around the block sizes.
#include "hp/checkpoint/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace hp::checkpoint {
namespace {

struct Vector {
  std::vector<unsigned char> data;
  uint32_t crc;
};

std::vector<Vector> known_vectors() {
  std::vector<Vector> v;
  const std::string digits = "123456789";
  v.push_back({{digits.begin(), digits.end()}, 0xE3069283u});
  v.push_back({{}, 0x00000000u});
  v.push_back({std::vector<unsigned char>(32, 0x00), 0x8A9136AAu});
  v.push_back({std::vector<unsigned char>(32, 0xFF), 0x62A8AB43u});
  std::vector<unsigned char> inc(32), dec(32);
  for (int i = 0; i < 32; ++i)
    inc[i] = static_cast<unsigned char>(i), dec[i] = static_cast<unsigned char>(31 - i);
  v.push_back({inc, 0x46DD794Eu});
  v.push_back({dec, 0x113FDB5Cu});
  return v;
}

TEST(Crc32c, KnownVectors) {
  for (const Vector& v : known_vectors()) {
    EXPECT_EQ(crc32c(v.data.data(), v.data.size()), v.crc) << v.data.size() << " bytes";
    EXPECT_EQ(detail::crc32c_portable(v.data.data(), v.data.size(), 0), v.crc);
    if (detail::crc32c_hw_available()) {
      EXPECT_EQ(detail::crc32c_sse42(v.data.data(), v.data.size(), 0), v.crc);
    }
  }
}

TEST(Crc32c, HardwareMatchesPortableAtEveryLengthAndAlignment) {
  ASSERT_TRUE(detail::crc32c_hw_available()) << "this CPU is expected to have SSE4.2";
  std::vector<unsigned char> buf(300);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t off = 0; off < 8; ++off)
    for (size_t n = 0; off + n <= 200; ++n)
      ASSERT_EQ(detail::crc32c_sse42(buf.data() + off, n, 0x1234u),
                detail::crc32c_portable(buf.data() + off, n, 0x1234u))
          << "offset " << off << " length " << n;
}

TEST(Crc32c, ContinuesAcrossBlocks) {
  const std::string s = "The quick brown fox jumps over the lazy dog, twice over, for the checksum";
  const uint32_t whole = crc32c(s.data(), s.size());
  for (size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(crc32c(s.data() + cut, s.size() - cut, crc32c(s.data(), cut)), whole) << cut;
  std::string flipped = s;
  flipped[10] ^= 1;
  EXPECT_NE(crc32c(flipped.data(), flipped.size()), whole);
}

}  // namespace
}  // namespace hp::checkpoint
