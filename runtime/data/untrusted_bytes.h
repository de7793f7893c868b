// Reading bytes whose producer is not trusted (data files): little-endian loads from any
// address, and text from the input made safe to print in a message.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace cb {

// A T stored little-endian at p (any alignment; the host is little-endian, checked where used).
template <typename T>
inline T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Text from the input for a message: printable ASCII kept, the rest escaped, cut at `max`.
inline std::string printable(std::string_view s, size_t max = 100) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace cb
