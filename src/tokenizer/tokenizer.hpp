// Tokenizers read from GGUF metadata, and a streaming detokenizer.
#pragma once
#include <cstdint>
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

enum class TokenizerKind { spm, bpe };

// How a byte-level BPE tokenizer splits text into words before merging (tokenizer.ggml.pre).
enum class BpePre {
  gpt2,    // "gpt2"/"gpt-2" (or no key): GPT-2's regex
  smollm,  // "smollm": every digit alone, then GPT-2's regex (SmolLM/SmolLM2, StarCoder-style vocabularies)
  llama3,  // "llama-bpe"/"llama3": Llama 3's regex (case-insensitive contractions, numbers in groups of 3);
           // a word that is itself in the vocabulary is not merged (ignore_merges)
};

class Tokenizer {
 public:
  // Builds the tokenizer described by tokenizer.ggml.* metadata. Throws Error(bad_model) for missing/inconsistent
  // metadata and Error(unsupported) for a tokenizer model it does not implement (the message names it).
  static Tokenizer from_gguf(const GgufFile &file);
  // The same, with tokenizer.ggml.pre replaced by `pre` (a BPE vocabulary under another pre-tokeniser; tests).
  static Tokenizer from_gguf(const GgufFile &file, const std::string &pre);
  // A Hugging Face tokenizer.json of a byte-level BPE model (GPT-2, SmolLM, Llama 3 pre-tokenisers), with the
  // special ids and add_bos from tokenizer_config.json / config.json when given (null: absent).
  // Throws Error(bad_model) for malformed content, Error(unsupported) for another tokenizer kind.
  static Tokenizer from_hf(const JsonValue &tokenizer_json, const JsonValue *tokenizer_config, const JsonValue *config);

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

  // Text to ids. With add_bos, the model's BOS (if any) is prepended. Never throws on any byte sequence.
  // BPE vocabularies: with parse_special, the text of control and user-defined tokens (e.g. "<|im_start|>") found
  // in `text` becomes those tokens, as the Hugging Face tokenizer does by default; without it, it is plain text
  // (use that for untrusted user input inside a chat template).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;
  // BPE: the words the pre-tokeniser cuts `text` into (no special-token handling). Empty for SPM.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  BpePre bpe_pre() const { return pre_; }
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
  // A stable 64-bit fingerprint of the vocabulary (pieces, scores, types, special ids) for snapshot headers.
  uint64_t fingerprint() const;

 private:
  static Tokenizer load(const GgufFile &file, const std::string *pre_override);
  std::vector<int32_t> encode_spm(std::string_view text) const;
  void init_bpe(const GgufFile &file, const std::string &pre);
  void init_bpe(const std::string &pre, const std::vector<std::string_view> &merges);
  void init_eog();
  void encode_bpe(std::string_view text, bool parse_special, std::vector<int32_t> *out) const;
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
  // Byte-level BPE only.
  BpePre pre_ = BpePre::gpt2;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank (lower merges first)
  std::vector<std::string> merges_;                       // as stored, for the fingerprint
  std::vector<int32_t> specials_;                         // control + user-defined ids, longest text first
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
