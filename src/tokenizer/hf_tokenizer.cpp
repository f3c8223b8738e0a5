// Tokenizer::from_hf: a Hugging Face tokenizer.json (byte-level BPE) turned into the same tables the GGUF path
// builds, so encoding and decoding are shared. The pre-tokeniser is recognised from its description.
#include <algorithm>

#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

namespace {

[[noreturn]] void bad(const std::string &msg) { fail(Status::bad_model, "tokenizer.json: " + msg); }

// The pre-tokeniser: SmolLM's Sequence[Digits(individual), ByteLevel(regex)], Llama 3's Sequence[Split(regex with
// \p{N}{1,3}), ByteLevel(no regex)], or GPT-2's ByteLevel(regex).
std::string detect_pre(const JsonValue *pre) {
  if (pre == nullptr || !pre->is_object()) fail(Status::unsupported, "tokenizer.json: no pre_tokenizer; infokv reads byte-level BPE only");
  auto type_of = [](const JsonValue &v) {
    const JsonValue *t = v.find("type");
    return t != nullptr && t->is_string() ? t->as_string() : std::string();
  };
  std::vector<const JsonValue *> parts;
  if (type_of(*pre) == "Sequence") {
    const JsonValue *list = pre->find("pretokenizers");
    if (list == nullptr || !list->is_array()) bad("Sequence pre_tokenizer without pretokenizers");
    for (const JsonValue &p : list->items()) parts.push_back(&p);
  } else {
    parts.push_back(pre);
  }
  bool digits = false, byte_level = false, byte_regex = false, llama3_split = false;
  for (const JsonValue *p : parts) {
    const std::string t = type_of(*p);
    if (t == "Digits") {
      const JsonValue *ind = p->find("individual_digits");
      digits = ind != nullptr && ind->is_bool() && ind->as_bool();
      if (!digits) fail(Status::unsupported, "tokenizer.json: Digits pre-tokenizer without individual_digits");
    } else if (t == "ByteLevel") {
      byte_level = true;
      const JsonValue *r = p->find("use_regex");
      byte_regex = r == nullptr || (r->is_bool() && r->as_bool());
      const JsonValue *ap = p->find("add_prefix_space");
      if (ap != nullptr && ap->is_bool() && ap->as_bool())
        fail(Status::unsupported, "tokenizer.json: ByteLevel with add_prefix_space is not supported");
    } else if (t == "Split") {
      const JsonValue *pat = p->find("pattern");
      const JsonValue *rx = pat != nullptr ? pat->find("Regex") : nullptr;
      if (rx != nullptr && rx->is_string() && rx->as_string().find("\\p{N}{1,3}") != std::string::npos) llama3_split = true;
      else fail(Status::unsupported, "tokenizer.json: a Split pre-tokenizer with a pattern infokv does not know");
    } else {
      fail(Status::unsupported, "tokenizer.json: pre-tokenizer '" + t + "' is not supported");
    }
  }
  if (!byte_level) fail(Status::unsupported, "tokenizer.json: not a byte-level BPE tokenizer");
  if (llama3_split && !byte_regex && !digits) return "llama-bpe";
  if (digits && byte_regex && !llama3_split) return "smollm";
  if (!digits && byte_regex && !llama3_split) return "gpt2";
  fail(Status::unsupported, "tokenizer.json: a combination of pre-tokenizers infokv does not know");
}

// "bos_token": "<s>" or {"content": "<s>", ...}
std::string token_text(const JsonValue *v) {
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->as_string();
  const JsonValue *c = v->find("content");
  return c != nullptr && c->is_string() ? c->as_string() : std::string();
}

}  // namespace

Tokenizer Tokenizer::from_hf(const JsonValue &tj, const JsonValue *tcfg, const JsonValue *cfg) {
  if (!tj.is_object()) bad("not an object");
  const JsonValue *model = tj.find("model");
  if (model == nullptr || !model->is_object()) bad("no model");
  const JsonValue *mtype = model->find("type");
  if (mtype == nullptr || !mtype->is_string() || mtype->as_string() != "BPE")
    fail(Status::unsupported, "tokenizer.json: model type '" + (mtype && mtype->is_string() ? mtype->as_string() : "?") +
                                  "' is not supported (infokv reads byte-level BPE)");
  const std::string pre = detect_pre(tj.find("pre_tokenizer"));
  const JsonValue *vocab = model->find("vocab");
  const JsonValue *merges = model->find("merges");
  if (vocab == nullptr || !vocab->is_object() || vocab->members().empty()) bad("model.vocab is missing or empty");
  if (merges == nullptr || !merges->is_array()) bad("model.merges is missing");
  const JsonValue *added = tj.find("added_tokens");
  if (added != nullptr && !added->is_array()) bad("added_tokens is not an array");

  constexpr int64_t kMaxVocab = int64_t{1} << 24;
  int64_t n = 0;
  auto check_id = [&](const JsonValue *id, const std::string &what) {
    if (id == nullptr || !id->is_integer() || id->as_int() < 0 || id->as_int() >= kMaxVocab) bad("bad id for " + what);
    n = std::max(n, id->as_int() + 1);
    return static_cast<int32_t>(id->as_int());
  };
  for (const auto &[piece, id] : vocab->members()) check_id(&id, "'" + piece + "'");
  if (added != nullptr)
    for (const JsonValue &a : added->items()) check_id(a.find("id"), "an added token");

  Tokenizer t;
  t.model_name_ = "gpt2";
  t.kind_ = TokenizerKind::bpe;
  t.pieces_.assign(static_cast<size_t>(n), std::string());
  t.scores_.assign(static_cast<size_t>(n), 0.0f);
  t.types_.assign(static_cast<size_t>(n), TokenType::unused);  // ids nothing names stay unused
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (const auto &[piece, id] : vocab->members()) {
    const auto k = static_cast<size_t>(id.as_int());
    if (seen[k]) bad("id " + std::to_string(k) + " appears twice in the vocabulary");
    seen[k] = 1;
    t.pieces_[k] = piece;
    t.types_[k] = TokenType::normal;
  }
  if (added != nullptr)
    for (const JsonValue &a : added->items()) {
      const JsonValue *content = a.find("content"), *special = a.find("special");
      if (content == nullptr || !content->is_string()) bad("an added token has no content");
      const auto k = static_cast<size_t>(a.find("id")->as_int());
      if (seen[k] && t.pieces_[k] != content->as_string()) bad("added token id " + std::to_string(k) + " is also another token");
      seen[k] = 1;
      t.pieces_[k] = content->as_string();
      t.types_[k] = special != nullptr && special->is_bool() && special->as_bool() ? TokenType::control : TokenType::user_defined;
    }
  for (size_t k = 0; k < t.pieces_.size(); ++k)
    if (!t.pieces_[k].empty()) t.piece_to_id_[t.pieces_[k]] = static_cast<int32_t>(k);

  // Special ids: tokenizer_config.json's token texts, else config.json's ids.
  auto id_of_text = [&](const std::string &s) { return s.empty() ? -1 : t.find_piece(s); };
  auto cfg_id = [&](const char *key) -> int32_t {
    const JsonValue *v = cfg != nullptr ? cfg->find(key) : nullptr;
    if (v != nullptr && v->is_array() && !v->items().empty()) v = &v->items()[0];
    if (v == nullptr || !v->is_integer() || v->as_int() < 0 || v->as_int() >= n) return -1;
    return static_cast<int32_t>(v->as_int());
  };
  t.bos_ = tcfg != nullptr ? id_of_text(token_text(tcfg->find("bos_token"))) : -1;
  if (t.bos_ < 0) t.bos_ = cfg_id("bos_token_id");
  t.eos_ = tcfg != nullptr ? id_of_text(token_text(tcfg->find("eos_token"))) : -1;
  if (t.eos_ < 0) t.eos_ = cfg_id("eos_token_id");
  t.unk_ = -1;
  t.add_space_prefix_ = false;
  const JsonValue *ab = tcfg != nullptr ? tcfg->find("add_bos_token") : nullptr;
  if (ab != nullptr && ab->is_bool()) {
    t.add_bos_ = ab->as_bool();
  } else {
    // Llama 3 adds BOS through its post-processor (TemplateProcessing naming the BOS text).
    const JsonValue *pp = tj.find("post_processor");
    const JsonValue *single = pp != nullptr ? pp->find("single") : nullptr;
    t.add_bos_ = false;
    if (single != nullptr && single->is_array() && t.bos_ >= 0)
      for (const JsonValue &item : single->items()) {
        const JsonValue *st = item.find("SpecialToken");
        const JsonValue *id = st != nullptr ? st->find("id") : nullptr;
        if (id != nullptr && id->is_string() && id->as_string() == t.pieces_[static_cast<size_t>(t.bos_)]) t.add_bos_ = true;
      }
  }
  if (cfg != nullptr) {
    const JsonValue *eos = cfg->find("eos_token_id");
    if (eos != nullptr && eos->is_array())
      for (const JsonValue &e : eos->items())
        if (e.is_integer() && e.as_int() >= 0 && e.as_int() < n) t.eog_.push_back(static_cast<int32_t>(e.as_int()));
  }
  t.init_eog();

  std::vector<std::string> merge_strings;
  merge_strings.reserve(merges->items().size());
  for (const JsonValue &m : merges->items()) {
    if (m.is_string()) {
      merge_strings.push_back(m.as_string());
    } else if (m.is_array() && m.items().size() == 2 && m.items()[0].is_string() && m.items()[1].is_string()) {
      merge_strings.push_back(m.items()[0].as_string() + " " + m.items()[1].as_string());
    } else {
      bad("merge " + std::to_string(merge_strings.size()) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  std::vector<std::string_view> views(merge_strings.begin(), merge_strings.end());
  t.init_bpe(pre, views);
  return t;
}

}  // namespace infokv
