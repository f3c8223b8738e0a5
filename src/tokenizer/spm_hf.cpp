// SentencePiece-style BPE read from a Hugging Face tokenizer.json (Llama 2, TinyLlama, Mistral). The text between
// added tokens gets its "▁" prefix (where the file's normalizer / Metaspace puts one) and "▁" for each space, is cut
// into characters, a character the vocabulary lacks becomes its <0xXX> byte tokens (byte_fallback) or <unk>, and the
// file's merges join adjacent symbols, lowest rank first, leftmost first among equals. That is the Hugging Face BPE
// model's algorithm. It differs from llama.cpp's score-driven one used for GGUF "llama" vocabularies (a pair whose
// concatenation is a token but that no merge lists stays apart there), so the ranks are kept rather than turned
// into scores.
#include <queue>

#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

namespace {

constexpr const char kSpaceEscape[] = "\xE2\x96\x81";  // U+2581 '▁'
constexpr size_t kSpaceEscapeLen = 3;

[[noreturn]] void bad(const std::string &msg) { fail(Status::bad_model, "tokenizer.json: " + msg); }

uint64_t pair_key(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}

struct Sym {
  int prev, next;
  int32_t id;  // -1 once merged into its left neighbour
};

struct Candidate {
  int left;
  int32_t rank;
  int32_t left_id, right_id, merged;
};

// Lowest rank first; among equal ranks the leftmost pair (as the Hugging Face BPE model's queue).
struct CandidateLess {
  bool operator()(const Candidate &a, const Candidate &b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

bool flag(const JsonValue &model, const char *key, bool fallback) {
  const JsonValue *v = model.find(key);
  return v != nullptr && v->is_bool() ? v->as_bool() : fallback;
}

}  // namespace

void Tokenizer::init_hf_spm(const JsonValue &model, SpmPrefix prefix, const std::vector<std::string> &merges) {
  spm_prefix_ = prefix;
  add_space_prefix_ = prefix != SpmPrefix::never;
  byte_fallback_ = flag(model, "byte_fallback", false);
  fuse_unk_ = flag(model, "fuse_unk", false);
  unk_ = -1;
  const JsonValue *unk = model.find("unk_token");
  if (unk != nullptr && unk->is_string()) {
    unk_ = find_piece(unk->as_string());
    if (unk_ < 0) bad("model.unk_token '" + unk->as_string() + "' is not in the vocabulary");
    types_[static_cast<size_t>(unk_)] = TokenType::unknown;
  }

  // Only <0xXX> pieces stand for bytes here (llama.cpp's GGUF path also takes a one-byte piece; the Hugging Face
  // byte fallback does not).
  for (int32_t &id : byte_to_id_) id = -1;
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const std::string &p = pieces_[static_cast<size_t>(id)];
    if (types_[static_cast<size_t>(id)] != TokenType::normal || p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>')
      continue;
    const std::string hex = p.substr(3, 2);
    if (hex.find_first_not_of("0123456789ABCDEFabcdef") != std::string::npos) continue;
    types_[static_cast<size_t>(id)] = TokenType::byte;
    byte_to_id_[std::stoi(hex, nullptr, 16)] = id;
  }

  if (merges.size() > static_cast<size_t>(INT32_MAX)) bad("model.merges has too many entries");
  merges_.reserve(merges.size());
  pair_merge_.reserve(merges.size());
  for (size_t k = 0; k < merges.size(); ++k) {
    // Pieces hold "▁" where text has spaces, so the first space separates the two halves.
    const std::string &m = merges[k];
    const size_t sp = m.find(' ');
    const std::string where = "merge " + std::to_string(k) + " ('" + m.substr(0, 64) + "')";
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size()) bad(where + " is not of the form 'left right'");
    const int32_t l = find_piece(m.substr(0, sp)), r = find_piece(m.substr(sp + 1));
    const int32_t merged = find_piece(m.substr(0, sp) + m.substr(sp + 1));
    // The Hugging Face library refuses such a file too.
    if (l < 0 || r < 0 || merged < 0) bad(where + " names a token that is not in the vocabulary");
    merges_.push_back(m);
    pair_merge_.emplace(pair_key(l, r), std::make_pair(static_cast<int32_t>(k), merged));
  }
}

void Tokenizer::encode_hf_spm(std::string_view text, bool parse_special, std::vector<int32_t> *out) const {
  std::string norm;
  split_specials(text, parse_special, out, [&](std::string_view stretch, size_t offset) {
    // Metaspace prepends only when the stretch (with its spaces escaped) does not already start with "▁"; its
    // "first" scheme only at the start of the whole text. The Prepend normaliser always does.
    const bool escaped = stretch[0] == ' ' || stretch.compare(0, kSpaceEscapeLen, kSpaceEscape) == 0;
    const bool prefix = spm_prefix_ == SpmPrefix::prepend || (spm_prefix_ == SpmPrefix::always && !escaped) ||
                        (spm_prefix_ == SpmPrefix::first && !escaped && offset == 0);
    norm.clear();
    if (prefix) norm.append(kSpaceEscape, kSpaceEscapeLen);
    for (char c : stretch) {
      if (c == ' ') norm.append(kSpaceEscape, kSpaceEscapeLen);
      else norm.push_back(c);
    }
    hf_spm_stretch(norm, out);
  });
}

void Tokenizer::hf_spm_stretch(const std::string &normalized, std::vector<int32_t> *out) const {
  if (ignore_merges_) {
    const int32_t whole = find_piece(normalized);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  unicode::decode_utf8(normalized, &cps, &offs);  // a byte that is not UTF-8 is a character of its own
  std::vector<int32_t> ids;
  ids.reserve(normalized.size());
  bool after_unk = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const int32_t id = find_piece(normalized.substr(offs[i], offs[i + 1] - offs[i]));
    if (id >= 0) {
      ids.push_back(id);
      after_unk = false;
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (size_t b = offs[i]; all_bytes && b < offs[i + 1]; ++b) all_bytes = byte_to_id_[static_cast<uint8_t>(normalized[b])] >= 0;
    if (all_bytes) {
      for (size_t b = offs[i]; b < offs[i + 1]; ++b) ids.push_back(byte_to_id_[static_cast<uint8_t>(normalized[b])]);
      after_unk = false;
      continue;
    }
    // Without <unk> the character is dropped (the Hugging Face library would fail the whole encode).
    if (unk_ >= 0 && !(fuse_unk_ && after_unk)) ids.push_back(unk_);
    after_unk = unk_ >= 0;
  }
  hf_spm_merge(&ids);
  out->insert(out->end(), ids.begin(), ids.end());
}

void Tokenizer::hf_spm_merge(std::vector<int32_t> *ids) const {
  if (ids->size() < 2) return;
  std::vector<Sym> syms(ids->size());
  for (size_t k = 0; k < ids->size(); ++k)
    syms[k] = Sym{static_cast<int>(k) - 1, k + 1 < ids->size() ? static_cast<int>(k) + 1 : -1, (*ids)[k]};
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateLess> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const int32_t a = syms[static_cast<size_t>(l)].id, b = syms[static_cast<size_t>(r)].id;
    auto it = pair_merge_.find(pair_key(a, b));
    if (it != pair_merge_.end()) queue.push(Candidate{l, it->second.first, a, b, it->second.second});
  };
  for (int k = 1; k < static_cast<int>(syms.size()); ++k) try_add(k - 1, k);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Sym &l = syms[static_cast<size_t>(c.left)];
    // Stale when either side has changed since the candidate was queued.
    if (l.id != c.left_id || l.next < 0 || syms[static_cast<size_t>(l.next)].id != c.right_id) continue;
    Sym &r = syms[static_cast<size_t>(l.next)];
    l.id = c.merged;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  ids->clear();
  for (int k = 0; k != -1; k = syms[static_cast<size_t>(k)].next) ids->push_back(syms[static_cast<size_t>(k)].id);
}

}  // namespace infokv
