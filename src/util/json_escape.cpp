#include "util/json_escape.hpp"

#include <cstdint>
#include <cstdio>

namespace infokv {

namespace {
// Length of a valid UTF-8 sequence starting at s[i], or 0.
size_t utf8_len(const std::string &s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}
}  // namespace

std::string json_escape(const std::string &s) {
  std::string o;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = utf8_len(s, i);
      if (n == 0) {
        o += "\\ufffd";
        ++i;
      } else {
        o.append(s, i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
    ++i;
  }
  return o;
}

}  // namespace infokv
