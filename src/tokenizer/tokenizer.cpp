#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <queue>

#include "gguf/gguf.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

constexpr const char kSpaceEscape[] = "\xE2\x96\x81";  // U+2581 '▁', SentencePiece's stand-in for ' '
constexpr size_t kSpaceEscapeLen = 3;
constexpr const char kReplacement[] = "\xEF\xBF\xBD";   // U+FFFD

// Reads element k of a numeric GGUF array; the mapping gives no alignment guarantee, hence memcpy.
template <typename T> T array_elem(const GgufValue &a, uint64_t k) {
  T v;
  std::memcpy(&v, a.raw + k * sizeof(T), sizeof(T));
  return v;
}

// "<0xAB>" -> 0xAB, or -1 when the piece is not of that exact form.
int parse_byte_piece(const std::string &p) {
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Special-token ids: absent key -> fallback; -1 or UINT32_MAX (what converters write for "none") -> -1.
int32_t special_id(const GgufFile &f, const std::string &key, int32_t fallback, int32_t n_vocab) {
  const GgufValue *v = f.find(key);
  if (v == nullptr) return fallback < n_vocab ? fallback : -1;
  int64_t id = f.get_int(key, -1);
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  if (id < 0 || id >= n_vocab)
    fail(Status::bad_model, "tokenizer metadata '" + key + "' = " + std::to_string(id) + " is outside the vocabulary of " +
                                std::to_string(n_vocab) + " tokens");
  return static_cast<int32_t>(id);
}

// Length of the symbol starting at t[offs]: the character its lead byte announces (llama.cpp's unicode_len_utf8),
// but a single byte when the bytes that follow are not all continuation bytes. llama.cpp would swallow them, so
// "\xF0 a" turned into one byte-fallback symbol that carried the escaped space out as the bytes of '▁' and broke
// the round trip. On valid UTF-8 both rules cut the same symbols, so the ids stay identical to llama.cpp's.
size_t symbol_len(const std::string &t, size_t offs) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  size_t len = lookup[static_cast<uint8_t>(t[offs]) >> 4];
  if (len > t.size() - offs) return 1;
  for (size_t j = 1; j < len; ++j)
    if ((static_cast<uint8_t>(t[offs + j]) & 0xC0) != 0x80) return 1;
  return len;
}

struct Symbol {
  int prev;
  int next;
  const char *text;
  size_t n;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; among equal scores the leftmost pair (llama.cpp's llm_bigram_spm::comparator).
struct BigramLess {
  bool operator()(const Bigram &l, const Bigram &r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

void fnv_bytes(uint64_t &h, const void *p, size_t n) {
  const auto *b = static_cast<const uint8_t *>(p);
  for (size_t k = 0; k < n; ++k) {
    h ^= b[k];
    h *= 0x100000001b3ull;
  }
}

// Hashes integers byte by byte, least significant first, so the fingerprint does not depend on host endianness.
void fnv_u64(uint64_t &h, uint64_t v) {
  for (int k = 0; k < 8; ++k) {
    uint8_t b = static_cast<uint8_t>(v >> (8 * k));
    fnv_bytes(h, &b, 1);
  }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile &file) { return load(file, nullptr); }

Tokenizer Tokenizer::from_gguf(const GgufFile &file, const std::string &pre) { return load(file, &pre); }

Tokenizer Tokenizer::load(const GgufFile &file, const std::string *pre_override) {
  Tokenizer t;
  t.model_name_ = file.get_string_req("tokenizer.ggml.model");
  if (t.model_name_ == "llama") {
    t.kind_ = TokenizerKind::spm;
  } else if (t.model_name_ == "gpt2") {
    t.kind_ = TokenizerKind::bpe;
  } else {
    fail(Status::unsupported, "unsupported tokenizer model '" + t.model_name_ + "' (infokv reads 'llama' and 'gpt2')");
  }
  const bool bpe = t.kind_ == TokenizerKind::bpe;

  const GgufValue *tokens = file.get_array("tokenizer.ggml.tokens", GgufValueType::STRING);
  if (tokens == nullptr) fail(Status::bad_model, "missing metadata key 'tokenizer.ggml.tokens'");
  if (tokens->count == 0) fail(Status::bad_model, "tokenizer.ggml.tokens is empty");
  if (tokens->count > static_cast<uint64_t>(INT32_MAX))
    fail(Status::bad_model, "tokenizer.ggml.tokens has " + std::to_string(tokens->count) + " entries, too many");
  const auto n = static_cast<size_t>(tokens->count);

  const GgufValue *scores = file.get_array("tokenizer.ggml.scores", GgufValueType::FLOAT32);
  if (scores != nullptr && scores->count != tokens->count)
    fail(Status::bad_model, "tokenizer.ggml.scores has " + std::to_string(scores->count) + " entries but tokenizer.ggml.tokens has " +
                                std::to_string(n));
  const GgufValue *types = file.get_array("tokenizer.ggml.token_type", GgufValueType::INT32);
  if (types != nullptr && types->count != tokens->count)
    fail(Status::bad_model, "tokenizer.ggml.token_type has " + std::to_string(types->count) +
                                " entries but tokenizer.ggml.tokens has " + std::to_string(n));

  t.pieces_.reserve(n);
  t.scores_.assign(n, 0.0f);
  t.types_.assign(n, TokenType::normal);
  t.piece_to_id_.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    t.pieces_.emplace_back(tokens->strings[k]);
    if (scores != nullptr) {
      t.scores_[k] = array_elem<float>(*scores, k);
      if (t.scores_[k] != t.scores_[k]) fail(Status::bad_model, "tokenizer score of token " + std::to_string(k) + " is NaN");
    }
    if (types != nullptr) {
      int32_t ty = array_elem<int32_t>(*types, k);
      if (ty < 0 || ty > static_cast<int32_t>(TokenType::byte))
        fail(Status::bad_model, "token " + std::to_string(k) + " has unknown token type " + std::to_string(ty));
      t.types_[k] = static_cast<TokenType>(ty);
    }
    if (t.types_[k] == TokenType::byte && parse_byte_piece(t.pieces_[k]) < 0)
      fail(Status::bad_model, "byte token " + std::to_string(k) + " is '" + t.pieces_[k] + "', expected <0xXX>");
    // A later duplicate wins, as in llama.cpp's token_to_id, so both pick the same id for a piece.
    if (!t.pieces_[k].empty()) t.piece_to_id_[t.pieces_[k]] = static_cast<int32_t>(k);
  }

  const auto nv = static_cast<int32_t>(n);
  // llama.cpp's SPM defaults when the keys are absent; a BPE vocabulary has no conventional ids.
  t.bos_ = special_id(file, "tokenizer.ggml.bos_token_id", bpe ? -1 : 1, nv);
  t.eos_ = special_id(file, "tokenizer.ggml.eos_token_id", bpe ? -1 : 2, nv);
  t.unk_ = special_id(file, "tokenizer.ggml.unknown_token_id", bpe ? -1 : 0, nv);
  t.add_bos_ = file.get_bool("tokenizer.ggml.add_bos_token", !bpe);
  t.add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix", !bpe);
  const int32_t eot = special_id(file, "tokenizer.ggml.eot_token_id", -1, nv);
  if (eot >= 0) t.eog_.push_back(eot);
  t.init_eog();
  if (bpe) {
    t.init_bpe(file, pre_override != nullptr ? *pre_override : file.get_string("tokenizer.ggml.pre", "gpt2"));
    t.fingerprint_ = t.compute_fingerprint();
    return t;
  }

  // Byte fallback as llama.cpp's byte_to_token: the <0xXX> piece, else the one-byte piece itself, else <unk>.
  for (int b = 0; b < 256; ++b) {
    static const char hex[] = "0123456789ABCDEF";
    const char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
    auto it = t.piece_to_id_.find(buf);
    if (it == t.piece_to_id_.end()) it = t.piece_to_id_.find(std::string(1, static_cast<char>(b)));
    t.byte_to_id_[b] = it != t.piece_to_id_.end() ? it->second : t.unk_;
  }
  t.fingerprint_ = t.compute_fingerprint();
  return t;
}

void Tokenizer::init_eog() {
  for (const char *p : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"}) {
    auto it = piece_to_id_.find(p);
    if (it != piece_to_id_.end() && types_[static_cast<size_t>(it->second)] == TokenType::control)
      eog_.push_back(it->second);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  if (text.empty()) return out;
  if (kind_ == TokenizerKind::none)
    fail(Status::unsupported, "the model has no tokenizer (its checkpoint has no tokenizer.json): give it token ids, not text");
  if (kind_ == TokenizerKind::bpe) {
    encode_bpe(text, parse_special, &out);
    return out;
  }
  if (spm_prefix_ != SpmPrefix::gguf) {
    encode_hf_spm(text, parse_special, &out);
    return out;
  }
  std::vector<int32_t> body = encode_spm(text);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// SentencePiece BPE exactly as llama.cpp's llm_tokenizer_spm: merge the best-scoring adjacent pair until none is
// in the vocabulary. Stale queue entries are recognised by a size mismatch rather than removed.
std::vector<int32_t> Tokenizer::encode_spm(std::string_view raw) const {
  std::string text;
  text.reserve(raw.size() * 2 + kSpaceEscapeLen);
  if (add_space_prefix_) text.append(kSpaceEscape, kSpaceEscapeLen);
  for (char c : raw) {
    if (c == ' ') {
      text.append(kSpaceEscape, kSpaceEscapeLen);
    } else {
      text.push_back(c);
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    Symbol s;
    s.text = text.data() + offs;
    s.n = symbol_len(text, offs);
    offs += s.n;
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = offs == text.size() ? -1 : static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  std::string scratch;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    scratch.assign(symbols[left].text, symbols[left].n + symbols[right].n);
    auto it = piece_to_id_.find(scratch);
    if (it == piece_to_id_.end()) return;
    queue.push(Bigram{left, right, scores_[static_cast<size_t>(it->second)], scratch.size()});
  };
  for (int k = 1; k < static_cast<int>(symbols.size()); ++k) try_add(k - 1, k);

  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol &l = symbols[b.left];
    Symbol &r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  std::vector<int32_t> out;
  out.reserve(symbols.size());
  for (int k = symbols.empty() ? -1 : 0; k != -1; k = symbols[k].next) {
    const Symbol &s = symbols[k];
    scratch.assign(s.text, s.n);
    auto it = piece_to_id_.find(scratch);
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (size_t j = 0; j < s.n; ++j) {
      int32_t id = byte_to_id_[static_cast<uint8_t>(s.text[j])];
      if (id >= 0) out.push_back(id);  // a vocabulary without byte tokens or <unk> loses the byte
    }
  }
  return out;
}

Tokenizer Tokenizer::without_vocabulary(int32_t n_vocab, int32_t bos, int32_t eos) {
  Tokenizer t;
  t.kind_ = TokenizerKind::none;
  t.model_name_ = "none";
  t.pieces_.assign(static_cast<size_t>(n_vocab), std::string());
  t.scores_.assign(static_cast<size_t>(n_vocab), 0.0f);
  t.types_.assign(static_cast<size_t>(n_vocab), TokenType::unused);
  std::fill(std::begin(t.byte_to_id_), std::end(t.byte_to_id_), -1);
  t.bos_ = bos >= 0 && bos < n_vocab ? bos : -1;
  t.eos_ = eos >= 0 && eos < n_vocab ? eos : -1;
  t.add_bos_ = false;
  t.init_eog();
  t.fingerprint_ = t.compute_fingerprint();
  return t;
}

// Unknown tokens decode to nothing, like control tokens and like llama.cpp's token_to_piece without `special`:
// they carry no text of their own, and inventing one (" ⁇ ") would put bytes in the output that no input had.
std::string Tokenizer::token_bytes(int32_t id) const {
  if (!valid(id)) fail(Status::out_of_range, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                 std::to_string(n_vocab()) + " tokens");
  if (kind_ == TokenizerKind::bpe) return bpe_token_bytes(id);
  const std::string &p = pieces_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::byte: return std::string(1, static_cast<char>(parse_byte_piece(p)));
    case TokenType::control:
    case TokenType::unknown:
    case TokenType::unused: return std::string();
    case TokenType::undefined:
    case TokenType::normal:
    case TokenType::user_defined: break;
  }
  std::string out;
  out.reserve(p.size());
  for (size_t k = 0; k < p.size();) {
    if (p.compare(k, kSpaceEscapeLen, kSpaceEscape) == 0) {
      out.push_back(' ');
      k += kSpaceEscapeLen;
    } else {
      out.push_back(p[k++]);
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

uint64_t Tokenizer::compute_fingerprint() const {
  uint64_t h = 0xcbf29ce484222325ull;
  fnv_u64(h, static_cast<uint64_t>(kind_));
  fnv_u64(h, pieces_.size());
  for (size_t k = 0; k < pieces_.size(); ++k) {
    fnv_u64(h, pieces_[k].size());  // length prefix: ("ab","c") and ("a","bc") must differ
    fnv_bytes(h, pieces_[k].data(), pieces_[k].size());
    uint32_t bits;
    std::memcpy(&bits, &scores_[k], sizeof(bits));
    fnv_u64(h, bits);
    fnv_u64(h, static_cast<uint64_t>(types_[k]));
  }
  fnv_u64(h, static_cast<uint64_t>(static_cast<int64_t>(bos_)));
  fnv_u64(h, static_cast<uint64_t>(static_cast<int64_t>(eos_)));
  fnv_u64(h, static_cast<uint64_t>(static_cast<int64_t>(unk_)));
  // These change the ids a text encodes to, so a snapshot made under other settings must not match.
  fnv_u64(h, add_bos_ ? 1 : 0);
  fnv_u64(h, add_space_prefix_ ? 1 : 0);
  // Settings only tokenizer.json gives (NFC, ignore_merges other than llama.cpp's, where "▁" goes): hashed only
  // when set, so the fingerprints of GGUF vocabularies, and thus their snapshots, stay what they were.
  const bool default_ignore = kind_ == TokenizerKind::bpe && pre_ == BpePre::llama3;
  const uint64_t extra = (nfc_ ? 1u : 0u) | (ignore_merges_ != default_ignore ? 2u : 0u) |
                         (spm_prefix_ != SpmPrefix::gguf ? 4u * (1u + static_cast<uint32_t>(spm_prefix_)) : 0u) |
                         (spm_prefix_ != SpmPrefix::gguf && byte_fallback_ ? 64u : 0u) | (fuse_unk_ ? 128u : 0u);
  if (extra != 0) fnv_u64(h, extra);
  if (kind_ == TokenizerKind::bpe || !merges_.empty()) {
    if (kind_ == TokenizerKind::bpe) fnv_u64(h, static_cast<uint64_t>(pre_));
    fnv_u64(h, merges_.size());
    for (const std::string &m : merges_) {
      fnv_u64(h, m.size());
      fnv_bytes(h, m.data(), m.size());
    }
  }
  return h;
}

// ---- StreamingDetokenizer ----

namespace {

// Length of the complete, valid UTF-8 character at s[i..], 0 when the bytes end before it is complete (and are
// a valid prefix so far), or -k when s[i..i+k) is an invalid maximal subpart (Unicode's "substitution of maximal
// subparts", the same rule WHATWG decoders and Python follow).
int utf8_step(const std::string &s, size_t i) {
  auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte; it excludes overlongs, surrogates, > U+10FFFF
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;  // continuation byte without a lead, C0/C1 (always overlong), F5..FF
  }
  for (int j = 1; j < len; ++j) {
    if (i + j >= s.size()) return 0;
    auto b = static_cast<uint8_t>(s[i + j]);
    if (j == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -j;
  }
  return len;
}

}  // namespace

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_->token_bytes(id);  // throws before changing anything for a bad id
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    int step = utf8_step(pending_, i);
    if (step == 0) break;  // a valid but unfinished character: wait for the next token
    if (step > 0) {
      out.append(pending_, i, static_cast<size_t>(step));
      i += static_cast<size_t>(step);
    } else {
      out += kReplacement;
      i += static_cast<size_t>(-step);
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::flush() {
  // What is held is at most one valid-so-far prefix of a character (push consumed everything else), so it is one
  // maximal subpart and becomes one U+FFFD.
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace infokv
