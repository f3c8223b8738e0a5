// Byte-level BPE (tokenizer.ggml.model = "gpt2"): special tokens matched verbatim, the pre-tokeniser named by
// tokenizer.ggml.pre cuts the rest into words, each word's bytes become GPT-2's printable characters, and ranked
// merges join them. The pre-tokenisers are hand-written equivalents of the regexes (as llama.cpp's
// unicode_regex_split_custom_*), so no regex engine is needed.
#include <algorithm>
#include <queue>

#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

// Code point classes of a word split. kEnd stands for "past the end" and is in no class.
struct Cps {
  const std::vector<uint32_t> &cp;
  size_t begin, end;
  static constexpr uint32_t kEnd = 0xFFFFFFFFu;
  uint32_t at(size_t i) const { return i < end ? cp[i] : kEnd; }
  bool letter(size_t i) const { return i < end && unicode::is_letter(cp[i]); }
  bool number(size_t i) const { return i < end && unicode::is_number(cp[i]); }
  bool space(size_t i) const { return i < end && unicode::is_whitespace(cp[i]); }
  bool other(size_t i) const { return i < end && !letter(i) && !number(i) && !space(i); }
};

uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// The length of the contraction 's|'t|'re|'ve|'m|'ll|'d at pos (case-insensitive when any_case), or 0.
size_t contraction_at(const Cps &c, size_t pos, bool any_case) {
  if (c.at(pos) != '\'' || pos + 1 >= c.end) return 0;
  auto lower = [&](size_t i) { return any_case ? ascii_lower(c.at(i)) : c.at(i); };
  const uint32_t n1 = lower(pos + 1);
  if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
  if (pos + 2 >= c.end) return 0;
  const uint32_t n2 = lower(pos + 2);
  return (n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l') ? 3 : 0;
}

// \s+(?!\S)|\s+ for a run of ws >= 1 spaces at pos: where the word ends (the last space goes to a word after it).
size_t space_run_end(const Cps &c, size_t pos, size_t ws) { return ws > 1 && pos + ws < c.end ? pos + ws - 1 : pos + ws; }

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Appends the end index (code points) of each word in [begin, end).
void split_gpt2(const Cps &c, std::vector<size_t> *ends) {
  size_t pos = c.begin;
  while (pos < c.end) {
    const uint32_t cpt = c.at(pos);
    if (const size_t n = contraction_at(c, pos, false)) {
      pos += n;
      ends->push_back(pos);
      continue;
    }
    const size_t p2 = cpt == ' ' ? pos + 1 : pos;
    if (c.letter(p2)) {
      pos = p2 + 1;
      while (c.letter(pos)) ++pos;
      ends->push_back(pos);
      continue;
    }
    if (c.number(p2)) {
      pos = p2 + 1;
      while (c.number(pos)) ++pos;
      ends->push_back(pos);
      continue;
    }
    if (c.other(p2)) {
      pos = p2 + 1;
      while (c.other(pos)) ++pos;
      ends->push_back(pos);
      continue;
    }
    size_t ws = 0;
    while (c.space(pos + ws)) ++ws;
    if (ws > 0) {
      pos = space_run_end(c, pos, ws);
      ends->push_back(pos);
      continue;
    }
    ends->push_back(++pos);  // unreachable: every code point is in some class
  }
}

// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
//          \s+(?!\S)|\s+
// Qwen2 is the same pattern with \p{N} in place of \p{N}{1,3}: max_digits 1 instead of 3.
void split_llama3(const Cps &c, size_t max_digits, std::vector<size_t> *ends) {
  size_t pos = c.begin;
  while (pos < c.end) {
    const uint32_t cpt = c.at(pos);
    if (const size_t n = contraction_at(c, pos, true)) {
      pos += n;
      ends->push_back(pos);
      continue;
    }
    if (!(cpt == '\r' || cpt == '\n' || c.number(pos))) {
      if (c.letter(pos) || c.letter(pos + 1)) {
        ++pos;
        while (c.letter(pos)) ++pos;
        ends->push_back(pos);
        continue;
      }
    }
    if (c.number(pos)) {
      size_t ini = pos;
      while (c.number(pos)) {
        if (++pos - ini >= max_digits) {
          ends->push_back(pos);
          ini = pos;
        }
      }
      if (ends->empty() || ends->back() != pos) ends->push_back(pos);
      continue;
    }
    const size_t p2 = cpt == ' ' ? pos + 1 : pos;
    if (c.other(p2)) {
      pos = p2 + 1;
      while (c.other(pos)) ++pos;
      while (c.at(pos) == '\r' || c.at(pos) == '\n') ++pos;
      ends->push_back(pos);
      continue;
    }
    size_t ws = 0, last_rn = 0;
    while (c.space(pos + ws)) {
      const uint32_t w = c.at(pos + ws);
      if (w == '\r' || w == '\n') last_rn = pos + ws + 1;
      ++ws;
    }
    if (last_rn > 0) {  // \s*[\r\n]+
      pos = last_rn;
      ends->push_back(pos);
      continue;
    }
    if (ws > 0) {
      pos = space_run_end(c, pos, ws);
      ends->push_back(pos);
      continue;
    }
    ends->push_back(++pos);
  }
}

struct Sym {
  int prev, next;
  size_t off, n;  // byte span in the mapped word; n = 0 once merged into its left neighbour
};

struct Pair {
  int left, right;
  int32_t rank;
  size_t size;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct PairLess {
  bool operator()(const Pair &a, const Pair &b) const { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); }
};

}  // namespace

void Tokenizer::init_bpe(const GgufFile &file, const std::string &pre) {
  const GgufValue *merges = file.get_array("tokenizer.ggml.merges", GgufValueType::STRING);
  if (merges == nullptr) fail(Status::bad_model, "missing metadata key 'tokenizer.ggml.merges' (needed by a gpt2 tokenizer)");
  init_bpe(pre, merges->strings);
}

void Tokenizer::init_bpe(const std::string &pre, const std::vector<std::string_view> &merges) {
  if (pre == "gpt2" || pre == "gpt-2") pre_ = BpePre::gpt2;
  else if (pre == "smollm") pre_ = BpePre::smollm;
  else if (pre == "llama-bpe" || pre == "llama3") pre_ = BpePre::llama3;
  else if (pre == "qwen2") pre_ = BpePre::qwen2;
  else fail(Status::unsupported, "unsupported BPE pre-tokenizer '" + pre + "' (infokv knows gpt2, smollm, llama-bpe, qwen2)");
  // llama.cpp skips the merges of a word that is already a token for Llama 3 only; tokenizer.json states it itself
  // (from_hf overrides this).
  ignore_merges_ = pre_ == BpePre::llama3;

  // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for 256, 257, ...
  std::fill(std::begin(char_byte_), std::end(char_byte_), static_cast<int16_t>(-1));
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = unicode::byte_level_codepoint(static_cast<uint8_t>(b));
    byte_char_[b].clear();
    unicode::append_utf8(&byte_char_[b], cp);
    char_byte_[cp] = static_cast<int16_t>(b);
  }

  if (merges.size() > static_cast<size_t>(INT32_MAX)) fail(Status::bad_model, "tokenizer merges have too many entries");
  merges_.reserve(merges.size());
  merge_rank_.reserve(merges.size());
  for (size_t k = 0; k < merges.size(); ++k) {
    std::string_view m = merges[k];
    // "left right": both halves non-empty. The left half may itself start with a space only in vocabularies that
    // contain one, hence the search from 1 (as llama.cpp).
    const size_t sp = m.size() < 2 ? std::string_view::npos : m.find(' ', 1);
    if (sp == std::string_view::npos || sp + 1 >= m.size())
      fail(Status::bad_model, "tokenizer merges entry " + std::to_string(k) + " is not of the form 'left right'");
    merges_.emplace_back(m);
    merge_rank_.emplace(merges_.back(), static_cast<int32_t>(k));  // the first (best) rank of a repeated merge wins
  }

  std::vector<int32_t> specials;
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const TokenType ty = types_[static_cast<size_t>(id)];
    if (ty == TokenType::control || ty == TokenType::user_defined) specials.push_back(id);
  }
  init_specials(std::move(specials));
}

void Tokenizer::init_specials(std::vector<int32_t> ids) {
  specials_.clear();
  for (int32_t id : ids)
    if (!pieces_[static_cast<size_t>(id)].empty()) specials_.push_back(id);
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)].size() > pieces_[static_cast<size_t>(b)].size();
  });
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  if (kind_ != TokenizerKind::bpe || text.empty()) return words;
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  unicode::decode_utf8(text, &cps, &offs);
  std::vector<size_t> ends;
  auto run = [&](size_t b, size_t e) {
    Cps c{cps, b, e};
    if (pre_ == BpePre::llama3) split_llama3(c, 3, &ends);
    else if (pre_ == BpePre::qwen2) split_llama3(c, 1, &ends);
    else split_gpt2(c, &ends);
  };
  if (pre_ == BpePre::smollm) {
    // Digits(individual_digits): every number character is a word of its own; the regex runs between them.
    size_t b = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (!unicode::is_number(cps[i])) continue;
      if (b < i) run(b, i);
      ends.push_back(i + 1);
      b = i + 1;
    }
    if (b < cps.size()) run(b, cps.size());
  } else {
    run(0, cps.size());
  }
  size_t start = 0;
  for (size_t e : ends) {
    words.emplace_back(text.substr(offs[start], offs[e] - offs[start]));
    start = e;
  }
  return words;
}

void Tokenizer::split_specials(std::string_view text, bool parse_special, std::vector<int32_t> *out,
                               const std::function<void(std::string_view, size_t)> &plain) const {
  // Leftmost-longest match of special-token texts; the stretches between them are ordinary text.
  size_t start = 0, i = 0;
  auto flush = [&](size_t upto) {
    if (upto > start) plain(text.substr(start, upto - start), start);
  };
  if (parse_special && !specials_.empty()) {
    while (i < text.size()) {
      int32_t hit = -1;
      for (int32_t id : specials_) {
        const std::string &p = pieces_[static_cast<size_t>(id)];
        if (p[0] == text[i] && text.compare(i, p.size(), p) == 0) {
          hit = id;  // longest first
          break;
        }
      }
      if (hit < 0) {
        ++i;
        continue;
      }
      flush(i);
      out->push_back(hit);
      i += pieces_[static_cast<size_t>(hit)].size();
      start = i;
    }
  }
  flush(text.size());
}

void Tokenizer::encode_bpe(std::string_view text, bool parse_special, std::vector<int32_t> *out) const {
  std::string normalized;
  split_specials(text, parse_special, out, [&](std::string_view stretch, size_t) {
    // tokenizer.json's normaliser runs on the text between added tokens (theirs are not normalised).
    if (nfc_ && unicode::nfc(stretch, &normalized)) stretch = normalized;
    for (const std::string &w : pre_tokenize(stretch)) bpe_word(w, out);
  });
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t> *out) const {
  std::string mapped;
  mapped.reserve(word.size() * 2);
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (char ch : word) {
    const std::string &m = byte_char_[static_cast<uint8_t>(ch)];
    syms.push_back(Sym{static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1, mapped.size(), m.size()});
    mapped += m;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  if (ignore_merges_) {
    auto it = piece_to_id_.find(mapped);
    if (it != piece_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }

  std::priority_queue<Pair, std::vector<Pair>, PairLess> queue;
  std::string key;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(mapped, syms[static_cast<size_t>(l)].off, syms[static_cast<size_t>(l)].n);
    key.push_back(' ');
    key.append(mapped, syms[static_cast<size_t>(r)].off, syms[static_cast<size_t>(r)].n);
    auto it = merge_rank_.find(key);
    if (it == merge_rank_.end()) return;
    queue.push(Pair{l, r, it->second, syms[static_cast<size_t>(l)].n + syms[static_cast<size_t>(r)].n});
  };
  for (int k = 1; k < static_cast<int>(syms.size()); ++k) try_add(k - 1, k);
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym &l = syms[static_cast<size_t>(p.left)];
    Sym &r = syms[static_cast<size_t>(p.right)];
    if (l.n == 0 || r.n == 0 || l.next != p.right || l.n + r.n != p.size) continue;  // stale entry
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }

  for (int k = 0; k != -1; k = syms[static_cast<size_t>(k)].next) {
    const Sym &s = syms[static_cast<size_t>(k)];
    key.assign(mapped, s.off, s.n);
    auto it = piece_to_id_.find(key);
    if (it != piece_to_id_.end()) {
      out->push_back(it->second);
      continue;
    }
    // A symbol the vocabulary lacks: its byte characters one by one. A byte with no token of its own is dropped,
    // as the Hugging Face tokenizer and llama.cpp do (real vocabularies lack bytes that never occur in UTF-8, such
    // as 0xC0 and 0xF5..0xFF). It is not replaced by <unk>: SmolLM2's <unk> is <|endoftext|>, a control token
    // that would end the text.
    std::vector<uint32_t> cps;
    std::vector<size_t> offs;
    unicode::decode_utf8(key, &cps, &offs);
    for (size_t j = 0; j < cps.size(); ++j) {
      auto jt = piece_to_id_.find(key.substr(offs[j], offs[j + 1] - offs[j]));
      if (jt != piece_to_id_.end()) out->push_back(jt->second);
    }
  }
}

std::string Tokenizer::bpe_token_bytes(int32_t id) const {
  const std::string &p = pieces_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::control:
    case TokenType::unknown:
    case TokenType::unused: return std::string();
    case TokenType::user_defined: return p;
    default: break;
  }
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  unicode::decode_utf8(p, &cps, &offs);
  std::string out;
  out.reserve(p.size());
  for (size_t j = 0; j < cps.size(); ++j) {
    const uint32_t cp = cps[j];
    if (cp < 512 && char_byte_[cp] >= 0) out.push_back(static_cast<char>(char_byte_[cp]));
    else out.append(p, offs[j], offs[j + 1] - offs[j]);  // not a byte character: keep the text as it is
  }
  return out;
}

}  // namespace infokv
