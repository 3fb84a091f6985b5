// CRC32C (Castagnoli, the iSCSI / ext4 / safetensors-world checksum): checkpoint data integrity.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (chosen once at run time), else a
// slicing-by-8 table; both give identical results. crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hp::checkpoint {

// Checksum of `n` bytes. Pass a previous result as `crc` to continue over a following block:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a‖b).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

namespace detail {
// The two implementations, for tests that compare them.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc);
// Only callable when crc32c_hw_available().
uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc);
bool crc32c_hw_available();
}  // namespace detail

}  // namespace hp::checkpoint
