// Tokenizers read from GGUF metadata, and a streaming detokenizer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infokv {

class GgufFile;
class JsonValue;

// llama.cpp's token attribute numbering (tokenizer.ggml.token_type).
enum class TokenType : int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

enum class TokenizerKind { spm, bpe, none };  // none: a checkpoint without a tokenizer (ids only)

// How a byte-level BPE tokenizer splits text into words before merging (tokenizer.ggml.pre).
enum class BpePre {
  gpt2,    // "gpt2"/"gpt-2" (or no key): GPT-2's regex
  smollm,  // "smollm": every digit alone, then GPT-2's regex (SmolLM/SmolLM2, StarCoder-style vocabularies)
  llama3,  // "llama-bpe"/"llama3": Llama 3's regex (case-insensitive contractions, numbers in groups of 3);
           // a word that is itself in the vocabulary is not merged (ignore_merges)
  qwen2,   // "qwen2": Llama 3's regex with every digit alone (\p{N} for \p{N}{1,3}); merges are never skipped
};

// Where a SentencePiece-style vocabulary read from tokenizer.json puts its word-start "▁" before a stretch of text
// (the stretches are what lies between added tokens).
enum class SpmPrefix : uint8_t {
  gguf,      // GGUF "llama" (llama.cpp): one "▁" before the whole text when add_space_prefix, scores pick merges
  prepend,   // normalizer Prepend("▁"): before every stretch, even one that starts with a space
  always,    // Metaspace prepend_scheme "always": before every stretch that does not already start with "▁"
  first,     // Metaspace prepend_scheme "first": the same, but only for a stretch at the start of the text
  never,     // Metaspace prepend_scheme "never"
};

class Tokenizer {
 public:
  // Builds the tokenizer described by tokenizer.ggml.* metadata. Throws Error(bad_model) for missing/inconsistent
  // metadata and Error(unsupported) for a tokenizer model it does not implement (the message names it).
  static Tokenizer from_gguf(const GgufFile &file);
  // The same, with tokenizer.ggml.pre replaced by `pre` (a BPE vocabulary under another pre-tokeniser; tests).
  static Tokenizer from_gguf(const GgufFile &file, const std::string &pre);
  // A Hugging Face tokenizer.json of a BPE model, with the special ids and add_bos from tokenizer_config.json /
  // config.json when given (null: absent). Two families: byte-level BPE (GPT-2, SmolLM, Llama 3, Qwen2
  // pre-tokenisers; Qwen2's NFC normaliser is applied), and SentencePiece-style BPE with byte fallback (Llama 2,
  // TinyLlama, Mistral: normalizer Prepend("▁") + Replace(" ", "▁"), or pre_tokenizer Metaspace), which becomes
  // TokenizerKind::spm but merges by the file's ranks as the Hugging Face library does. Added tokens are matched in
  // the text before anything else, as there. Throws Error(bad_model) for malformed content, Error(unsupported) for a
  // tokenizer kind, normaliser or pre-tokeniser it does not implement (the message names it).
  static Tokenizer from_hf(const JsonValue &tokenizer_json, const JsonValue *tokenizer_config, const JsonValue *config);
  // The stand-in for a checkpoint saved without a tokenizer (transformers' save_pretrained of a model alone): n_vocab
  // ids that decode to nothing, BOS/EOS as config.json gives them (-1: none). encode() of any non-empty text throws
  // Error(unsupported) saying so; the model still runs on token ids.
  static Tokenizer without_vocabulary(int32_t n_vocab, int32_t bos, int32_t eos);

  TokenizerKind kind() const { return kind_; }
  const std::string &model_name() const { return model_name_; }  // "llama", ...
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos() const { return bos_; }  // -1 when the model has none
  int32_t eos() const { return eos_; }  // -1 when the model has none
  bool add_bos() const { return add_bos_; }
  // End of generation: EOS, tokenizer.ggml.eot_token_id, and the control tokens <|im_end|>, <|eot_id|>,
  // <|end_of_text|>, <|endoftext|> where the vocabulary has them (as llama.cpp's special_eog_ids).
  bool is_eog(int32_t id) const {
    if (id == eos_) return true;
    for (int32_t e : eog_) if (e == id) return true;
    return false;
  }
  bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
  const std::string &piece(int32_t id) const { return pieces_.at(static_cast<size_t>(id)); }  // vocabulary text as stored
  TokenType type(int32_t id) const { return types_.at(static_cast<size_t>(id)); }
  float score(int32_t id) const { return scores_.at(static_cast<size_t>(id)); }

  // Text to ids. With add_bos, the model's BOS (if any) is prepended. Never throws on any byte sequence, except
  // Error(unsupported) for a model without a tokenizer (kind() == none) and non-empty text.
  // BPE vocabularies and tokenizer.json SentencePiece ones: with parse_special, the text of control and user-defined tokens (e.g. "<|im_start|>") found
  // in `text` becomes those tokens, as the Hugging Face tokenizer does by default; without it, it is plain text
  // (use that for untrusted user input inside a chat template).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;
  // BPE: the words the pre-tokeniser cuts `text` into (no special-token handling). Empty for SPM.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  BpePre bpe_pre() const { return pre_; }
  SpmPrefix spm_prefix() const { return spm_prefix_; }
  // Whether text is put in Unicode normalisation form C before it is split (tokenizer.json's NFC normaliser).
  bool normalizes_nfc() const { return nfc_; }
  // Looks a token up by its exact vocabulary text; -1 when absent.
  int32_t find_piece(const std::string &piece) const {
    auto it = piece_to_id_.find(piece);
    return it == piece_to_id_.end() ? -1 : it->second;
  }
  // The bytes a token stands for in text: '▁' becomes ' ', <0xXX> becomes that byte; control, unknown and unused
  // tokens are empty (as llama.cpp's token_to_piece without `special`).
  // Throws Error(out_of_range) for an id outside the vocabulary.
  std::string token_bytes(int32_t id) const;
  // Concatenated token_bytes of the ids (may end in the middle of a UTF-8 character).
  std::string decode(const std::vector<int32_t> &ids) const;
  // A stable 64-bit fingerprint of the vocabulary (pieces, scores, types, special ids) for snapshot headers;
  // computed once when the tokenizer is made (hashing a 150K vocabulary per snapshot cost a server 2.6% of its time).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  static Tokenizer load(const GgufFile &file, const std::string *pre_override);
  uint64_t compute_fingerprint() const;
  std::vector<int32_t> encode_spm(std::string_view text) const;
  void init_bpe(const GgufFile &file, const std::string &pre);
  void init_bpe(const std::string &pre, const std::vector<std::string_view> &merges);
  void init_eog();
  void init_specials(std::vector<int32_t> ids);
  void init_hf_spm(const JsonValue &model, SpmPrefix prefix, const std::vector<std::string> &merges);
  void hf_spm_merge(std::vector<int32_t> *ids) const;
  // Calls plain(stretch, offset) for each stretch of text between special-token matches (all of it without
  // parse_special) and appends the specials' ids in between.
  void split_specials(std::string_view text, bool parse_special, std::vector<int32_t> *out,
                      const std::function<void(std::string_view, size_t)> &plain) const;
  void encode_bpe(std::string_view text, bool parse_special, std::vector<int32_t> *out) const;
  void encode_hf_spm(std::string_view text, bool parse_special, std::vector<int32_t> *out) const;
  void hf_spm_stretch(const std::string &normalized, std::vector<int32_t> *out) const;
  void bpe_word(std::string_view word, std::vector<int32_t> *out) const;
  std::string bpe_token_bytes(int32_t id) const;

  TokenizerKind kind_ = TokenizerKind::spm;
  std::string model_name_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> piece_to_id_;
  int32_t byte_to_id_[256];  // <0xXX> tokens, -1 when absent
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  int32_t unk_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
  std::vector<int32_t> eog_;
  bool nfc_ = false;
  // Ranked merges: byte-level BPE, and SentencePiece vocabularies read from tokenizer.json (empty for GGUF "llama").
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank (lower merges first)
  std::vector<std::string> merges_;                       // as stored, for the fingerprint
  std::vector<int32_t> specials_;                         // texts matched before splitting, longest text first
  uint64_t fingerprint_ = 0;                              // compute_fingerprint(), set by every factory
  // SentencePiece from tokenizer.json only.
  SpmPrefix spm_prefix_ = SpmPrefix::gguf;
  bool byte_fallback_ = true;
  bool fuse_unk_ = false;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> pair_merge_;  // left id << 32 | right id -> (rank, merged id)
  // Byte-level BPE only.
  BpePre pre_ = BpePre::gpt2;
  bool ignore_merges_ = false;  // a word that is itself a token is not merged
  std::string byte_char_[256];                            // GPT-2's byte -> printable character (UTF-8)
  int16_t char_byte_[512];                                // inverse, indexed by code point; -1 when none
};

// Turns a stream of token ids into text without ever emitting part of a UTF-8 character: bytes of an unfinished
// character are held back until the character completes. Invalid sequences are emitted as U+FFFD.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer &tok) : tok_(&tok) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is held back (an incomplete character becomes U+FFFD) and resets.
  std::string flush();

 private:
  const Tokenizer *tok_;
  std::string pending_;
};

}  // namespace infokv
