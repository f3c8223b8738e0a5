// The little Unicode the byte-level BPE pre-tokenisers need: UTF-8 decoding that keeps invalid bytes, and the
// letter / number / white-space classes of \p{L}, \p{N} and \s.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infokv {
namespace unicode {

struct CodepointRange {
  uint32_t first;
  uint32_t last;
};
extern const CodepointRange kLetterRanges[];
extern const size_t kLetterRangesCount;
extern const CodepointRange kNumberRanges[];
extern const size_t kNumberRangesCount;

// A byte that is not part of a valid UTF-8 character decodes to kInvalidBase + byte: a value no character has,
// classed as neither letter, number nor space (so it lands in the "other symbols" pieces and keeps its byte).
constexpr uint32_t kInvalidBase = 0x110000;

// Decodes text into code points; offsets[i] is the byte offset of code point i, and offsets has one more entry
// (text.size()). Never fails: invalid sequences become one kInvalidBase + byte value per byte.
void decode_utf8(std::string_view text, std::vector<uint32_t> *cps, std::vector<size_t> *offsets);

bool is_letter(uint32_t cp);
bool is_number(uint32_t cp);
bool is_whitespace(uint32_t cp);  // the Unicode White_Space property, as regex \s

void append_utf8(std::string *out, uint32_t cp);  // cp < 0x110000

// Unicode normalisation form C of text (utf8proc), as tokenizer.json's NFC normaliser. Bytes that are not valid
// UTF-8 are kept as they are and the valid stretches between them are normalised on their own. Returns false (and
// leaves *out alone) when nothing would change, so callers keep their view of the input; throws only bad_alloc.
bool nfc(std::string_view text, std::string *out);

// GPT-2's bytes_to_unicode, which byte-level BPE vocabularies are written in: printable Latin-1 bytes stand for
// themselves, the others for 256, 257, ... in byte order.
uint32_t byte_level_codepoint(uint8_t b);

}  // namespace unicode
}  // namespace infokv
