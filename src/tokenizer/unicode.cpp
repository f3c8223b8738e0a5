#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

#include <utf8proc.h>

namespace infokv {
namespace unicode {

namespace {

bool in_ranges(const CodepointRange *r, size_t n, uint32_t cp) {
  const CodepointRange *end = r + n;
  const CodepointRange *it = std::upper_bound(r, end, cp, [](uint32_t v, const CodepointRange &x) { return v < x.first; });
  return it != r && cp <= (it - 1)->last;
}

}  // namespace

void decode_utf8(std::string_view s, std::vector<uint32_t> *cps, std::vector<size_t> *offsets) {
  cps->clear();
  offsets->clear();
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed second byte: excludes overlongs, surrogates and > U+10FFFF
    if (c < 0x80) { len = 1; cp = c; }
    else if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0Fu; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07u; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t j = 1; ok && j < len; ++j) {
      const auto b = static_cast<uint8_t>(s[i + j]);
      if (j == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) ok = false;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    offsets->push_back(i);
    if (ok) {
      cps->push_back(cp);
      i += len;
    } else {
      cps->push_back(kInvalidBase + c);
      i += 1;
    }
  }
  offsets->push_back(s.size());
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp < kInvalidBase && in_ranges(kLetterRanges, kLetterRangesCount, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp < kInvalidBase && in_ranges(kNumberRanges, kNumberRangesCount, cp);
}

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

void append_utf8(std::string *out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t byte_level_codepoint(uint8_t b) {
  auto printable = [](int c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  if (printable(b)) return b;
  uint32_t cp = 256;
  for (int c = 0; c < b; ++c) cp += printable(c) ? 0 : 1;
  return cp;
}

bool nfc(std::string_view text, std::string *out) {
  // Below U+0300 nothing composes or decomposes under NFC, and ASCII is the common case: skip the copy.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) return false;
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  decode_utf8(text, &cps, &offs);
  std::string result;
  result.reserve(text.size());
  size_t run = 0;  // first code point of the current valid stretch
  auto flush = [&](size_t upto) {
    if (upto == run) return;
    const size_t b = offs[run], e = offs[upto];
    utf8proc_uint8_t *dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(text.data() + b),
                                            static_cast<utf8proc_ssize_t>(e - b), &dst,
                                            static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    // Any other error cannot happen on valid UTF-8; keeping the text unnormalised is the safe answer if it does.
    if (n < 0) result.append(text.data() + b, e - b);
    else result.append(reinterpret_cast<const char *>(dst), static_cast<size_t>(n));
  };
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] < kInvalidBase) continue;
    flush(i);
    result.append(text.data() + offs[i], offs[i + 1] - offs[i]);
    run = i + 1;
  }
  flush(cps.size());
  if (result == text) return false;
  *out = std::move(result);
  return true;
}

}  // namespace unicode
}  // namespace infokv
