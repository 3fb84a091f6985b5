// libFuzzer target: any byte string is either a valid safetensors file whose every view lies inside
// the input, or an hp::Error; never a crash, leak or out-of-bounds read (ASan/UBSan enforce it).
//
//   ./build-fuzz/hp_safetensors_fuzz -dict=tests/fuzz/safetensors.dict -max_total_time=300 \
//       corpus/ tests/io/fixtures/safetensors/
#include <cstddef>
#include <cstdint>

#include "hp/core/error.h"
#include "hp/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = hp::io::SafetensorsFile::parse(data, size, "fuzz");
    // Touch the first and last byte of every view so ASan sees any escape from the input.
    volatile uint8_t sink = 0;
    for (const auto& t : f.tensors()) {
      if (t.nbytes == 0) continue;
      sink = sink ^ static_cast<uint8_t>(t.data[0]) ^ static_cast<uint8_t>(t.data[t.nbytes - 1]);
      if (t.numel() * static_cast<int64_t>(hp::dtype_size(t.dtype)) !=
          static_cast<int64_t>(t.nbytes))
        __builtin_trap();
    }
    for (const auto& [k, v] : f.metadata()) sink = sink ^ static_cast<uint8_t>(k.size() + v.size());
  } catch (const hp::Error&) {
  }
  return 0;
}
