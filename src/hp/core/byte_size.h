// Byte sizes as users write them ("6GiB", "512MiB", "1.5 GB", "4096") and as messages print them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hp {

// A non-negative number with an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB,
// GB, TB (powers of 1000); no unit = bytes. Fractions round down to whole bytes ("1.5KiB" = 1536).
// Throws ValueError("[<component>] <key>: ...") naming the value and the accepted forms.
int64_t parse_byte_size(std::string_view text, std::string_view key,
                        std::string_view component = "config");
// "1.50 MiB" (two decimals, binary units up to TiB).
std::string format_bytes(double bytes);

}  // namespace hp
