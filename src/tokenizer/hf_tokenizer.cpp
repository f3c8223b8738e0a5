// Tokenizer::from_hf: a Hugging Face tokenizer.json (byte-level BPE) turned into the same tables the GGUF path
// builds, so encoding and decoding are shared. The pre-tokeniser is recognised from its description.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

namespace {

[[noreturn]] void bad(const std::string &msg) { fail(Status::bad_model, "tokenizer.json: " + msg); }
[[noreturn]] void unsupported(const std::string &msg) { fail(Status::unsupported, "tokenizer.json: " + msg); }

constexpr const char kSpaceEscape[] = "\xE2\x96\x81";  // U+2581 '▁'

// The Split regexes infokv has hand-written splitters for (bpe.cpp), compared exactly: a regex that differs in any
// character may cut words differently, so it is refused rather than guessed at.
constexpr const char kLlama3Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char kQwen2Regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string type_of(const JsonValue &v) {
  const JsonValue *t = v.is_object() ? v.find("type") : nullptr;
  return t != nullptr && t->is_string() ? t->as_string() : std::string();
}

std::string string_of(const JsonValue &v, const char *key) {
  const JsonValue *s = v.is_object() ? v.find(key) : nullptr;
  return s != nullptr && s->is_string() ? s->as_string() : std::string();
}

bool absent(const JsonValue *v) { return v == nullptr || v->is_null(); }

// A Sequence's parts (under `list_key`), or the value itself.
std::vector<const JsonValue *> parts_of(const JsonValue &v, const char *list_key, const char *what) {
  std::vector<const JsonValue *> parts;
  if (type_of(v) == "Sequence") {
    const JsonValue *list = v.find(list_key);
    if (list == nullptr || !list->is_array()) bad(std::string("Sequence ") + what + " without " + list_key);
    for (const JsonValue &p : list->items()) parts.push_back(&p);
  } else {
    parts.push_back(&v);
  }
  return parts;
}

// The pre-tokeniser of a byte-level BPE: SmolLM's Sequence[Digits(individual), ByteLevel(regex)], Llama 3's and
// Qwen2's Sequence[Split(their regex, Isolated), ByteLevel(no regex)], or GPT-2's ByteLevel(regex).
std::string detect_pre(const JsonValue *pre) {
  if (absent(pre) || !pre->is_object())
    unsupported("no pre_tokenizer and no SentencePiece normalizer; infokv reads byte-level BPE and SentencePiece-style BPE");
  bool digits = false, byte_level = false, byte_regex = false;
  std::string split;
  for (const JsonValue *p : parts_of(*pre, "pretokenizers", "pre_tokenizer")) {
    const std::string t = type_of(*p);
    if (t == "Digits") {
      const JsonValue *ind = p->find("individual_digits");
      digits = ind != nullptr && ind->is_bool() && ind->as_bool();
      if (!digits) unsupported("Digits pre-tokenizer without individual_digits");
    } else if (t == "ByteLevel") {
      byte_level = true;
      const JsonValue *r = p->find("use_regex");
      byte_regex = r == nullptr || (r->is_bool() && r->as_bool());
      const JsonValue *ap = p->find("add_prefix_space");
      if (ap != nullptr && ap->is_bool() && ap->as_bool()) unsupported("ByteLevel with add_prefix_space is not supported");
    } else if (t == "Split") {
      const JsonValue *pat = p->find("pattern");
      const std::string rx = pat != nullptr ? string_of(*pat, "Regex") : std::string();
      const JsonValue *invert = p->find("invert");
      if (rx.empty()) unsupported("a Split pre-tokenizer without a Regex pattern is not supported");
      if (string_of(*p, "behavior") != "Isolated" || (invert != nullptr && !(invert->is_bool() && !invert->as_bool())))
        unsupported("a Split pre-tokenizer other than behavior Isolated, invert false is not supported");
      if (!split.empty()) unsupported("more than one Split pre-tokenizer is not supported");
      if (rx == kLlama3Regex) split = "llama-bpe";
      else if (rx == kQwen2Regex) split = "qwen2";
      else unsupported("a Split pre-tokenizer with a regex infokv does not know (it knows Llama 3's and Qwen2's): '" +
                       rx.substr(0, 160) + (rx.size() > 160 ? "...'" : "'"));
    } else {
      unsupported("pre-tokenizer '" + t + "' is not supported");
    }
  }
  if (!byte_level) unsupported("not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer) nor a SentencePiece-style one");
  if (!split.empty() && !byte_regex && !digits) return split;
  if (digits && byte_regex && split.empty()) return "smollm";
  if (!digits && byte_regex && split.empty()) return "gpt2";
  unsupported("a combination of pre-tokenizers infokv does not know");
}

// The normaliser of a byte-level BPE: none, or NFC (Qwen2). Returns whether it is NFC.
bool detect_nfc(const JsonValue *norm) {
  if (absent(norm)) return false;
  bool nfc = false;
  for (const JsonValue *p : parts_of(*norm, "normalizers", "normalizer")) {
    const std::string t = type_of(*p);
    if (t != "NFC") unsupported("normalizer '" + t + "' is not supported (infokv applies none or NFC to byte-level BPE)");
    nfc = true;
  }
  return nfc;
}

// Whether normalizer + pre_tokenizer describe SentencePiece-style BPE, and where its "▁" prefix goes:
//   normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] with no pre-tokenizer (Llama 2, TinyLlama), or
//   no normalizer with Metaspace("▁", prepend_scheme, split false) (newer conversions).
bool detect_spm(const JsonValue *norm, const JsonValue *pre, SpmPrefix *prefix) {
  if (!absent(pre) && type_of(*pre) == "Metaspace") {
    if (!absent(norm)) unsupported("Metaspace pre-tokenizer with a normalizer ('" + type_of(*norm) + "') is not supported");
    if (string_of(*pre, "replacement") != kSpaceEscape) unsupported("Metaspace replacement other than U+2581 is not supported");
    const JsonValue *split = pre->find("split");
    if (split == nullptr || !split->is_bool() || split->as_bool())
      unsupported("Metaspace with split (or without split false) is not supported: SentencePiece merges across '▁'");
    const JsonValue *scheme = pre->find("prepend_scheme");
    const JsonValue *add_prefix = pre->find("add_prefix_space");  // before prepend_scheme existed
    if (scheme != nullptr) {
      const std::string s = scheme->is_string() ? scheme->as_string() : std::string();
      if (s == "first") *prefix = SpmPrefix::first;
      else if (s == "always") *prefix = SpmPrefix::always;
      else if (s == "never") *prefix = SpmPrefix::never;
      else unsupported("Metaspace prepend_scheme '" + s + "' is not supported");
    } else {
      *prefix = add_prefix != nullptr && add_prefix->is_bool() && !add_prefix->as_bool() ? SpmPrefix::never : SpmPrefix::always;
    }
    return true;
  }
  if (!absent(pre) || absent(norm)) return false;
  const std::vector<const JsonValue *> parts = parts_of(*norm, "normalizers", "normalizer");
  if (parts.empty() || type_of(*parts[0]) != "Prepend") return false;
  const JsonValue *pattern = parts.size() == 2 ? parts[1]->find("pattern") : nullptr;
  if (parts.size() != 2 || string_of(*parts[0], "prepend") != kSpaceEscape || type_of(*parts[1]) != "Replace" ||
      pattern == nullptr || string_of(*pattern, "String") != " " || string_of(*parts[1], "content") != kSpaceEscape)
    unsupported("a normalizer starting with Prepend other than Sequence[Prepend(\"▁\"), Replace(\" \", \"▁\")] is not supported");
  *prefix = SpmPrefix::prepend;
  return true;
}

// BPE model options that change the ids and that infokv does not implement.
void check_model_options(const JsonValue &model) {
  const JsonValue *dropout = model.find("dropout");
  if (!absent(dropout) && !(dropout->is_number() && dropout->as_number() == 0.0))
    unsupported("BPE dropout is not supported");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonValue *v = model.find(key);
    if (!absent(v) && !(v->is_string() && v->as_string().empty()))
      unsupported(std::string("BPE ") + key + " is not supported");
  }
}

// "bos_token": "<s>" or {"content": "<s>", ...}
std::string token_text(const JsonValue *v) {
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->as_string();
  const JsonValue *c = v->find("content");
  return c != nullptr && c->is_string() ? c->as_string() : std::string();
}

// The vocabulary: model.vocab and added_tokens, every id checked; ids nothing names stay unused.
struct HfVocab {
  std::vector<std::string> pieces;
  std::vector<TokenType> types;
  std::vector<int32_t> added_ids;  // in the file's order
};

// Ids are dense in every real tokenizer (0 .. n-1, each named once; Llama 3, Qwen2.5 and SmolLM2 have no hole). A
// few unnamed ids are allowed (kept as unused tokens); more would size the tables by an id the file names rather
// than by what it holds: one token at id 2^24 - 1 would cost ~0.6 GB for a file of a few bytes.
int64_t allowed_holes(int64_t named) { return std::max<int64_t>(256, named / 8); }

HfVocab read_vocab(const JsonValue &vocab, const JsonValue *added) {
  constexpr int64_t kMaxVocab = int64_t{1} << 24;
  int64_t n = 0;
  auto check_id = [&](const JsonValue *id, const std::string &what) {
    if (id == nullptr || !id->is_integer() || id->as_int() < 0 || id->as_int() >= kMaxVocab) bad("bad id for " + what);
    n = std::max(n, id->as_int() + 1);
  };
  for (const auto &[piece, id] : vocab.members()) check_id(&id, "'" + piece + "'");
  if (added != nullptr)
    for (const JsonValue &a : added->items()) check_id(a.find("id"), "an added token");
  const int64_t named = static_cast<int64_t>(vocab.members().size() + (added != nullptr ? added->items().size() : 0));
  if (n > named + allowed_holes(named))
    bad("token ids are sparse: the highest is " + std::to_string(n - 1) + " but the file names " + std::to_string(named) +
        " tokens (at most " + std::to_string(allowed_holes(named)) + " unnamed ids are accepted)");

  HfVocab v;
  v.pieces.assign(static_cast<size_t>(n), std::string());
  v.types.assign(static_cast<size_t>(n), TokenType::unused);
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (const auto &[piece, id] : vocab.members()) {
    const auto k = static_cast<size_t>(id.as_int());
    if (seen[k]) bad("id " + std::to_string(k) + " appears twice in the vocabulary");
    seen[k] = 1;
    v.pieces[k] = piece;
    v.types[k] = TokenType::normal;
  }
  if (added == nullptr) return v;
  for (const JsonValue &a : added->items()) {
    const JsonValue *content = a.find("content"), *special = a.find("special");
    if (content == nullptr || !content->is_string()) bad("an added token has no content");
    const auto k = static_cast<size_t>(a.find("id")->as_int());
    if (seen[k] && v.pieces[k] != content->as_string()) bad("added token id " + std::to_string(k) + " is also another token");
    seen[k] = 1;
    v.pieces[k] = content->as_string();
    v.types[k] = special != nullptr && special->is_bool() && special->as_bool() ? TokenType::control : TokenType::user_defined;
    v.added_ids.push_back(static_cast<int32_t>(k));
  }
  return v;
}

struct HfSpecials {
  int32_t bos = -1, eos = -1;
  bool add_bos = false;
  std::vector<int32_t> eog;  // config.json's list of end ids, when it is a list
};

// Special ids: tokenizer_config.json's token texts, else config.json's ids; whether BOS is added.
HfSpecials read_specials(const Tokenizer &t, const JsonValue &tj, const JsonValue *tcfg, const JsonValue *cfg) {
  const int64_t n = t.n_vocab();
  auto id_of_text = [&](const std::string &s) { return s.empty() ? -1 : t.find_piece(s); };
  auto cfg_id = [&](const char *key) -> int32_t {
    const JsonValue *v = cfg != nullptr ? cfg->find(key) : nullptr;
    if (v != nullptr && v->is_array() && !v->items().empty()) v = &v->items()[0];
    if (v == nullptr || !v->is_integer() || v->as_int() < 0 || v->as_int() >= n) return -1;
    return static_cast<int32_t>(v->as_int());
  };
  HfSpecials s;
  s.bos = tcfg != nullptr ? id_of_text(token_text(tcfg->find("bos_token"))) : -1;
  if (s.bos < 0) s.bos = cfg_id("bos_token_id");
  s.eos = tcfg != nullptr ? id_of_text(token_text(tcfg->find("eos_token"))) : -1;
  if (s.eos < 0) s.eos = cfg_id("eos_token_id");
  const JsonValue *ab = tcfg != nullptr ? tcfg->find("add_bos_token") : nullptr;
  if (ab != nullptr && ab->is_bool()) {
    s.add_bos = ab->as_bool();
  } else {
    // Llama 3 adds BOS through its post-processor (TemplateProcessing naming the BOS text).
    const JsonValue *pp = tj.find("post_processor");
    const JsonValue *single = pp != nullptr ? pp->find("single") : nullptr;
    if (single != nullptr && single->is_array() && s.bos >= 0)
      for (const JsonValue &item : single->items()) {
        const JsonValue *st = item.find("SpecialToken");
        const JsonValue *id = st != nullptr ? st->find("id") : nullptr;
        if (id != nullptr && id->is_string() && id->as_string() == t.piece(s.bos)) s.add_bos = true;
      }
  }
  const JsonValue *eos = cfg != nullptr ? cfg->find("eos_token_id") : nullptr;
  if (eos != nullptr && eos->is_array())
    for (const JsonValue &e : eos->items())
      if (e.is_integer() && e.as_int() >= 0 && e.as_int() < n) s.eog.push_back(static_cast<int32_t>(e.as_int()));
  return s;
}

// model.merges as "a b" strings (the file holds "a b" or ["a", "b"]). As Hugging Face's BPE builder, each merge's
// halves and their join must be tokens of the vocabulary; a merge given twice is refused (the file is malformed, and
// a repeated list would otherwise cost memory without bound). Memory stays proportional to the file's content.
std::vector<std::string> read_merges(const JsonValue &merges, const Tokenizer &t) {
  if (merges.items().size() > static_cast<size_t>(t.n_vocab()) * 4)
    bad("model.merges has " + std::to_string(merges.items().size()) + " entries for a vocabulary of " +
        std::to_string(t.n_vocab()) + " tokens");
  std::vector<std::string> out;
  out.reserve(merges.items().size());
  std::unordered_map<std::string, size_t> first;
  first.reserve(merges.items().size());
  for (const JsonValue &m : merges.items()) {
    std::string a, b;
    if (m.is_string()) {
      const std::string &ab = m.as_string();
      const size_t sp = ab.size() < 2 ? std::string::npos : ab.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= ab.size())
        bad("merge " + std::to_string(out.size()) + " is not of the form \"left right\"");
      a = ab.substr(0, sp);
      b = ab.substr(sp + 1);
    } else if (m.is_array() && m.items().size() == 2 && m.items()[0].is_string() && m.items()[1].is_string()) {
      a = m.items()[0].as_string();
      b = m.items()[1].as_string();
    } else {
      bad("merge " + std::to_string(out.size()) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    for (const std::string *piece : {&a, &b})
      if (t.find_piece(*piece) < 0)
        bad("merge " + std::to_string(out.size()) + ": '" + *piece + "' is not in the vocabulary");
    if (t.find_piece(a + b) < 0) bad("merge " + std::to_string(out.size()) + ": '" + a + b + "' is not in the vocabulary");
    std::string joined = a + " " + b;
    // keyed by both halves (length-prefixed), so that ["a b", "c"] and ["a", "b c"] stay apart
    const auto [it, fresh] = first.emplace(std::to_string(a.size()) + ":" + a + b, out.size());
    if (!fresh)
      bad("merge " + std::to_string(out.size()) + " '" + joined + "' repeats merge " + std::to_string(it->second));
    out.push_back(std::move(joined));
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_hf(const JsonValue &tj, const JsonValue *tcfg, const JsonValue *cfg) {
  if (!tj.is_object()) bad("not an object");
  const JsonValue *model = tj.find("model");
  if (model == nullptr || !model->is_object()) bad("no model");
  const JsonValue *mtype = model->find("type");
  if (mtype == nullptr || !mtype->is_string() || mtype->as_string() != "BPE")
    fail(Status::unsupported, "tokenizer.json: model type '" + (mtype && mtype->is_string() ? mtype->as_string() : "?") +
                                  "' is not supported (infokv reads BPE)");
  check_model_options(*model);
  SpmPrefix spm = SpmPrefix::gguf;
  const bool is_spm = detect_spm(tj.find("normalizer"), tj.find("pre_tokenizer"), &spm);
  const std::string pre = is_spm ? std::string() : detect_pre(tj.find("pre_tokenizer"));
  const bool nfc = is_spm ? false : detect_nfc(tj.find("normalizer"));
  const JsonValue *vocab = model->find("vocab");
  const JsonValue *merges = model->find("merges");
  if (vocab == nullptr || !vocab->is_object() || vocab->members().empty()) bad("model.vocab is missing or empty");
  if (merges == nullptr || !merges->is_array()) bad("model.merges is missing");
  const JsonValue *added = tj.find("added_tokens");
  if (added != nullptr && !added->is_array()) bad("added_tokens is not an array");

  HfVocab v = read_vocab(*vocab, added);
  Tokenizer t;
  t.model_name_ = is_spm ? "llama" : "gpt2";
  t.kind_ = is_spm ? TokenizerKind::spm : TokenizerKind::bpe;
  t.pieces_ = std::move(v.pieces);
  t.scores_.assign(t.pieces_.size(), 0.0f);
  t.types_ = std::move(v.types);
  for (size_t k = 0; k < t.pieces_.size(); ++k)
    if (!t.pieces_[k].empty()) t.piece_to_id_[t.pieces_[k]] = static_cast<int32_t>(k);

  HfSpecials s = read_specials(t, tj, tcfg, cfg);
  t.bos_ = s.bos;
  t.eos_ = s.eos;
  t.add_bos_ = s.add_bos;
  t.eog_ = std::move(s.eog);
  t.unk_ = -1;
  t.add_space_prefix_ = false;
  t.init_eog();

  const std::vector<std::string> merge_strings = read_merges(*merges, t);
  if (is_spm) {
    t.init_hf_spm(*model, spm, merge_strings);
  } else {
    std::vector<std::string_view> views(merge_strings.begin(), merge_strings.end());
    t.init_bpe(pre, views);
    t.nfc_ = nfc;
  }
  // Hugging Face's default when the key is absent (files older than the option) is false.
  const JsonValue *ignore = model->find("ignore_merges");
  t.ignore_merges_ = ignore != nullptr && ignore->is_bool() && ignore->as_bool();
  // Every added token is matched in the text before the model sees it (also <unk>, which is not a control token).
  t.init_specials(std::move(v.added_ids));
  t.fingerprint_ = t.compute_fingerprint();
  return t;
}

}  // namespace infokv
